"""goodput benchmark: a seeded discrete-event simulation of what failure response speed is worth.

A large synchronous training job (default: 16,384 GPUs on 2,048 nodes for 54 days, the Llama 3 405B
setting) is interrupted at the rate and with the root-cause mix Meta reported for Llama 3. Every
interruption costs the work since the last checkpoint, detection, the recovery action, a wait for a
spare node if a node must be drained, requeue, and restart/restore. Three response models replay the
same failures (common random numbers):

  (a) manual:  no automation; a person notices (slower nights and weekends) and acts;
  (b) seed:    the other automated system: mean detection 69 s, action 94 s (unpublished means, not
      measured here), its action clock ending at the drain or (--seed-clock-ends running) at the job
      running again;
  (c) goodput: per failure class from one table with a source for each value
      (benchmarks/goodput_latencies.json; see benchmarks/_sim_classes.py), or --from-latency-json,
      or --detection-s/--action-s for every failure.
  An app-error is a person's to fix in both automated arms, or (--app-errors restart) each restarts it
  once. The fairness rows (benchmarks/_sim_variants.py) show each of these choices the other way.

Output: ETTR (effective training time ratio: kept training time / wall time), GPU-hours lost and
where they went, for each model, plus a sweep over the checkpoint interval. See
docs/benchmarks-goodput-sim.md for the model, the sources and the caveats.

    python -m benchmarks.goodput_sim [--json] [--seed N] [--reps N] [--plots] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._git import commit
from benchmarks._sim_classes import (
    DEFAULT_TABLE,
    LatencyFile,
    LatencyFileError,
    latency_report,
    read_latency_file,
    read_latency_table,
    render_latencies,
)
from benchmarks._sim_levers import DEFAULT_QUEUE_WAIT_MIN, evaluate_levers, render_levers
from benchmarks._sim_model import (
    LOST_PHASES,
    MODELS,
    PHASES,
    SimParams,
    analytic_ettr,
    class_shares,
    draw_failures,
    replication_seed,
    simulate,
)
from benchmarks._sim_variants import evaluate_variants, render_variants

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SWEEP = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)


def _parser() -> argparse.ArgumentParser:
    d = SimParams()
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.goodput_sim",
        description="Discrete-event simulation of ETTR under three failure-response models.",
    )
    a = ap.add_argument
    a("--json", action="store_true", help="print one JSON object as the last line")
    a("--seed", type=int, default=1)
    a("--reps", type=int, default=20, help="replications (independent failure histories)")
    a("--days", type=float, default=d.days)
    a("--gpus", type=int, default=d.gpus)
    a("--gpus-per-node", type=int, default=d.gpus_per_node)
    a("--ckpt-interval-min", type=float, default=d.ckpt_interval_min)
    a("--ckpt-save-s", type=float, default=d.ckpt_save_s, help="blocking time of one checkpoint save")
    a("--restart-min", type=float, default=d.restart_min, help="mean restart/restore cost")
    a("--requeue-min", type=float, default=d.requeue_min, help="requeue + scheduling time")
    a(
        "--failure-rate",
        type=float,
        default=d.failure_rate,
        help="interruptions per 1000 node-days (default: Llama 3, 419 / 54 days / 2048 nodes)",
    )
    a("--spares", type=int, default=None, help="spare nodes (default: one per 64 job nodes)")
    a("--levers-queue-wait-min", type=float, default=DEFAULT_QUEUE_WAIT_MIN,
      help="for the levers table: median queue wait of a replacement node without a hot-spare pool")
    a("--repair-days", type=float, default=d.repair_days, help="mean repair turnaround of a drained node")
    a("--seed-detection-s", type=float, default=d.seed_detection_s,
      help="(b) the other system's mean detection latency (unpublished)")
    a("--seed-action-s", type=float, default=d.seed_action_s,
      help="(b) the other system's mean action latency (unpublished)")
    a("--seed-clock-ends", choices=("drain", "running"), default=d.seed_clock_ends,
      help="(b) where its action clock ends: at the drain (requeue follows, as in goodput's arm) or at the "
      "job running again (its requeue is inside it)")
    a("--app-errors", choices=("person", "restart"), default=d.app_errors,
      help="(b) and (c): a person fixes an app-error, or each arm restarts it once")
    a("--detection-s", type=float, default=None,
      help=f"(c) median detection latency for every failure, instead of the table (default {d.detection_s:g})")
    a("--action-s", type=float, default=None,
      help=f"(c) median action latency for every failure, instead of the table (default {d.action_s:g})")
    a("--latency-table", type=Path, default=DEFAULT_TABLE,
      help="(c) goodput's latencies per failure class, each with its source (default: the shipped table)")
    a("--node-loss", choices=("measured", "conservative"), default="measured",
      help="(c) node-failure detection: the table's measured value, or Slurm's own timeout (its variant)")
    a(
        "--from-latency-json",
        type=Path,
        default=None,
        help="read (c) latencies per failure class from the latency benchmark's JSON (its `classes`: "
        "detection_p50_s and action_p50_s of each) instead of the table",
    )
    a("--auto-sigma", type=float, default=d.auto_sigma, help="lognormal sigma of (b) and (c) latencies")
    a(
        "--manual-on-detect-min",
        type=float,
        default=d.manual_on_detect_min,
        help="(a) median detection, Mon-Fri staffed hours",
    )
    a(
        "--manual-off-detect-min",
        type=float,
        default=d.manual_off_detect_min,
        help="(a) median detection, nights and weekends (capped by the next morning)",
    )
    a("--manual-action-min", type=float, default=d.manual_action_min, help="(a) median action time")
    a("--manual-sigma", type=float, default=d.manual_sigma, help="lognormal sigma of (a) latencies")
    a(
        "--sweep-min",
        type=str,
        default=",".join(f"{x:g}" for x in DEFAULT_SWEEP),
        help="checkpoint intervals (minutes) to sweep, comma-separated; empty for none",
    )
    a("--plots", action="store_true", help="write goodput-ettr.png and goodput-lost-time.png")
    a("--plot-dir", type=Path, default=REPO / "docs" / "img")
    return ap


def params_from_args(ns: argparse.Namespace) -> tuple[SimParams, LatencyFile | None]:
    """The scenario, and the latency file its per-class latencies came from (None: the command line).
    Raises LatencyFileError for a file without usable `classes`."""
    source: LatencyFile | None
    if ns.from_latency_json is not None:
        source = read_latency_file(ns.from_latency_json)
    elif ns.detection_s is None and ns.action_s is None:
        source = read_latency_table(ns.latency_table)
        shown = ns.latency_table.resolve()  # named from the repository, as the docs name it
        if shown.is_relative_to(REPO):
            source = dataclasses.replace(source, path=str(shown.relative_to(REPO)))
    else:
        source = None
    table = source.class_latency if source else ()
    if ns.node_loss == "conservative":
        if source is None or "node-loss-conservative" not in source.variants:
            raise LatencyFileError("--node-loss conservative needs a latency table with that variant")
        v = source.variants["node-loss-conservative"]
        table = tuple((c, v.detection_p50_s if c == v.cls else det, a) for c, det, a in table)
        sources = {**source.sources, v.cls: (v.source, source.sources[v.cls][1])}
        source = dataclasses.replace(source, class_latency=table, sources=sources)
    d = SimParams()
    p = SimParams(
        days=ns.days,
        gpus=ns.gpus,
        gpus_per_node=ns.gpus_per_node,
        ckpt_interval_min=ns.ckpt_interval_min,
        ckpt_save_s=ns.ckpt_save_s,
        restart_min=ns.restart_min,
        requeue_min=ns.requeue_min,
        failure_rate=ns.failure_rate,
        spares=ns.spares,
        repair_days=ns.repair_days,
        seed_detection_s=ns.seed_detection_s,
        seed_action_s=ns.seed_action_s,
        seed_clock_ends=ns.seed_clock_ends,
        app_errors=ns.app_errors,
        detection_s=d.detection_s if ns.detection_s is None else ns.detection_s,
        action_s=d.action_s if ns.action_s is None else ns.action_s,
        class_latency=table,
        auto_sigma=ns.auto_sigma,
        manual_on_detect_min=ns.manual_on_detect_min,
        manual_off_detect_min=ns.manual_off_detect_min,
        manual_action_min=ns.manual_action_min,
        manual_sigma=ns.manual_sigma,
    )
    return p, source


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def evaluate(params: SimParams, seed: int, reps: int, intervals: Sequence[float] = (),
             levers_queue_wait_min: float = DEFAULT_QUEUE_WAIT_MIN,
             source: LatencyFile | None = None) -> dict[str, Any]:
    """Run every model on the same `reps` failure histories; optionally sweep the checkpoint interval;
    then goodput with each lever beyond detection (benchmarks._sim_levers)."""
    seeds = [replication_seed(seed, r) for r in range(reps)]
    histories = [draw_failures(params, random.Random(s)) for s in seeds]
    gpus = params.gpus
    horizon_h = params.horizon_s / 3600.0
    models: dict[str, Any] = {}
    per_rep: dict[str, list[float]] = {}
    for m in MODELS:
        runs = [simulate(h, params, m) for h in histories]
        ettr = per_rep[m] = [r["productive"] / params.horizon_s for r in runs]
        lost = [gpus * (horizon_h - r["productive"] / 3600.0) for r in runs]
        hours = {ph: statistics.fmean(r[ph] / 3600.0 for r in runs) for ph in PHASES}
        n = statistics.fmean(r["interruptions"] for r in runs)
        models[m] = {
            "ettr": statistics.fmean(ettr),
            "ettr_std": _sd(ettr),
            "ettr_min": min(ettr),
            "ettr_max": max(ettr),
            "gpu_hours_lost": statistics.fmean(lost),
            "gpu_hours_lost_std": _sd(lost),
            "interruptions": n,
            "spare_waits": statistics.fmean(r["spare_waits"] for r in runs),
            "mean_detection_s": hours["detection"] * 3600.0 / n if n else 0.0,
            "mean_action_s": hours["action"] * 3600.0 / n if n else 0.0,
            "hours": hours,
            "lost_gpu_hours": {ph: hours[ph] * gpus for ph in LOST_PHASES},
        }
    # Paired differences on the same failure histories: far tighter than the spread of each ETTR.
    paired = {}
    for other in ("seed", "manual"):
        diff = [g - o for g, o in zip(per_rep["goodput"], per_rep[other], strict=True)]
        paired[f"goodput_minus_{other}"] = {"mean": statistics.fmean(diff), "std": _sd(diff), "min": min(diff)}
    sweep = []
    for minutes in intervals:
        sp = dataclasses.replace(params, ckpt_interval_min=minutes)
        row: dict[str, float] = {"ckpt_interval_min": minutes}
        for m in MODELS:
            e = [simulate(h, sp, m)["productive"] / sp.horizon_s for h in histories]
            row[f"ettr_{m}"], row[f"ettr_{m}_std"] = statistics.fmean(e), _sd(e)
        sweep.append(row)
    levers = evaluate_levers(params, histories, seeds, levers_queue_wait_min)
    variants = evaluate_variants(params, histories, source)
    return {"models": models, "paired_ettr_gain": paired, "sweep": sweep, "levers": levers, "variants": variants}


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point for `python -m benchmarks.goodput_sim` and the `python -m benchmarks goodput` dispatcher."""
    parser = _parser()
    ns = parser.parse_args(argv)
    if ns.reps < 1:
        parser.error("--reps must be at least 1")
    try:
        params, source = params_from_args(ns)
    except LatencyFileError as err:
        parser.error(str(err))
    intervals = [float(x) for x in ns.sweep_min.split(",") if x.strip()]
    started = time.perf_counter()
    ev = evaluate(params, ns.seed, ns.reps, intervals, ns.levers_queue_wait_min, source)
    models = ev["models"]
    # What decides these numbers: the model, its inputs' reader and the advice it borrows Daly's
    # interval from (`+dirty` when any of them differs from the commit).
    result: dict[str, Any] = {"benchmark": "goodput_sim", "commit": commit(
        "benchmarks/goodput_sim.py", "benchmarks/_sim_model.py", "benchmarks/_sim_levers.py",
        "benchmarks/_sim_classes.py", "benchmarks/_sim_variants.py", "benchmarks/goodput_latencies.json",
        "goodput/checkpoints/advice.py")}
    for m in MODELS:
        result[f"ettr_{m}"] = round(models[m]["ettr"], 5)
        result[f"ettr_{m}_std"] = round(models[m]["ettr_std"], 5)
    for m in MODELS:
        result[f"gpu_hours_lost_{m}"] = round(models[m]["gpu_hours_lost"])
    result["gpu_hours_saved_goodput_vs_seed"] = round(
        models["seed"]["gpu_hours_lost"] - models["goodput"]["gpu_hours_lost"]
    )
    result["gpu_hours_saved_goodput_vs_manual"] = round(
        models["manual"]["gpu_hours_lost"] - models["goodput"]["gpu_hours_lost"]
    )
    for other in ("seed", "manual"):
        gain = ev["paired_ettr_gain"][f"goodput_minus_{other}"]
        result[f"ettr_gain_goodput_vs_{other}"] = round(gain["mean"], 5)
        result[f"ettr_gain_goodput_vs_{other}_std"] = round(gain["std"], 5)
    result["ettr_analytic_seed"] = round(analytic_ettr(params, "seed"), 5)
    result["ettr_analytic_goodput"] = round(analytic_ettr(params, "goodput"), 5)
    result["job_mttf_h"] = round(params.mttf_h, 4)
    result["failures_per_day"] = round(24.0 / params.mttf_h, 4) if params.mttf_h > 0 else 0.0
    result["params"] = {
        **dataclasses.asdict(params),
        "nodes": params.nodes,
        "spare_nodes": params.spare_nodes,
        "seed": ns.seed,
        "reps": ns.reps,
        "goodput_latency_source": source.path if source else "command line",
        "node_loss": ns.node_loss,
    }
    del result["params"]["class_latency"]  # as goodput_latencies below, by name
    if source:  # every class has its own latency: the command-line ones were not used
        result["params"]["detection_s"] = result["params"]["action_s"] = None
    result["goodput_latencies"] = latency_report(params, class_shares(), source)
    result["models"] = models
    result["sweep"] = ev["sweep"]
    result["levers"] = ev["levers"]
    result["variants"] = ev["variants"]
    result["elapsed_s"] = round(time.perf_counter() - started, 3)
    if ns.plots:
        from benchmarks._sim_plots import write_plots

        written = write_plots(result, ns.plot_dir)
        result["plots"] = [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in written]
    print(render(result))
    if ns.json:
        print(json.dumps(_rounded(result), separators=(",", ":")))
    return result


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_rounded(v) for v in x]
    return x


def render(r: dict[str, Any]) -> str:
    p, ms = r["params"], r["models"]
    lines = [
        f"goodput simulation: {p['gpus']:,} GPUs ({p['nodes']:,} nodes) for {p['days']:g} days, "
        f"{p['reps']} replications, seed {p['seed']}",
        f"failures: {p['failure_rate']:.2f} per 1000 node-days -> job MTTF {r['job_mttf_h']:.2f} h "
        f"({r['failures_per_day']:.2f}/day of running time), mix from Llama 3 Table 5",
        f"checkpoint every {p['ckpt_interval_min']:g} min (save {p['ckpt_save_s']:g} s), restart "
        f"{p['restart_min']:g} min, requeue {p['requeue_min']:g} min, {p['spare_nodes']} spares, "
        f"repair {p['repair_days']:g} days",
        f"latencies: (a) people: detect median {p['manual_on_detect_min']:g} min staffed / "
        f"{p['manual_off_detect_min']:g} min off-hours, act median {p['manual_action_min']:g} min; "
        f"(b) seed (the other system): mean {p['seed_detection_s']:g} s + {p['seed_action_s']:g} s, unpublished "
        f"means, its clock ending at the {p['seed_clock_ends']}; app-errors: "
        f"{'a person fixes them' if p['app_errors'] == 'person' else 'restarted once'} in (b) and (c); "
        + (f"(c) goodput: median {p['detection_s']:g} s + {p['action_s']:g} s for every failure (command line)"
           if p["detection_s"] is not None else
           f"(c) goodput: per failure class from {p['goodput_latency_source']} (table below)"),
        "",
        f"{'model':<10}{'ETTR (mean ± sd)':>20}{'min..max':>17}{'interrupts':>12}"
        f"{'detect s':>10}{'action s':>10}{'GPU-h lost':>14}",
    ]
    for m in MODELS:
        x = ms[m]
        lines.append(
            f"{m:<10}{x['ettr']:>13.4f} ± {x['ettr_std']:.4f}{x['ettr_min']:>9.4f}..{x['ettr_max']:.4f}"
            f"{x['interruptions']:>12.1f}{x['mean_detection_s']:>10.0f}{x['mean_action_s']:>10.0f}"
            f"{x['gpu_hours_lost']:>14,.0f}"
        )
    lines.append(
        f"first-order check (renewal-reward, no spare waits): seed {r['ettr_analytic_seed']:.4f}, "
        f"goodput {r['ettr_analytic_goodput']:.4f}"
    )
    lines.append(
        f"goodput vs seed: ETTR {r['ettr_gain_goodput_vs_seed']:+.4f} ± {r['ettr_gain_goodput_vs_seed_std']:.4f} "
        f"(paired), {r['gpu_hours_saved_goodput_vs_seed']:,} GPU-h saved; vs manual: "
        f"{r['ettr_gain_goodput_vs_manual']:+.4f} ± {r['ettr_gain_goodput_vs_manual_std']:.4f}, "
        f"{r['gpu_hours_saved_goodput_vs_manual']:,} GPU-h saved"
    )
    lines += ["", "wall-clock hours lost per run (mean), by phase:"]
    lines.append(f"{'phase':<17}" + "".join(f"{m:>12}" for m in MODELS))
    for ph in LOST_PHASES:
        lines.append(f"{ph:<17}" + "".join(f"{ms[m]['hours'][ph]:>12.2f}" for m in MODELS))
    lines.append(
        f"{'total lost':<17}" + "".join(f"{sum(ms[m]['hours'][ph] for ph in LOST_PHASES):>12.2f}" for m in MODELS)
    )
    if p["detection_s"] is None:  # per class from a latency file
        lines += render_latencies(r["goodput_latencies"])
    if r["sweep"]:
        lines += ["", "ETTR by checkpoint interval (mean over replications):"]
        lines.append(f"{'interval min':<14}" + "".join(f"{m:>12}" for m in MODELS))
        for row in r["sweep"]:
            lines.append(f"{row['ckpt_interval_min']:<14g}" + "".join(f"{row[f'ettr_{m}']:>12.4f}" for m in MODELS))
    if "levers" in r:
        lines += render_levers(r["levers"])
    if "variants" in r:
        lines += render_variants(r["variants"])
    if "plots" in r:
        lines += ["", "plots: " + ", ".join(r["plots"])]
    lines.append(f"(simulated in {r['elapsed_s']:.2f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
