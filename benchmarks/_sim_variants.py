"""The fairness rows of `benchmarks.goodput_sim`: the headline comparison of the two automated arms
redone with each assumption that could lean it one way or the other changed, on the same failure
histories (common random numbers), so every row's gain is a paired difference.

A review found the comparison leaning (#33); these rows show how far each choice moves it:

* **node loss at Slurm's own timeout**: goodput's node-loss detection at SlurmdTimeout 300 s (as if it
  had no agent heartbeats), the table's conservative variant, instead of the measured value;
* **where the other system's clock ends**: its 94 s taken to end at the job running again (its
  requeue inside it) rather than at the drain, so both arms end at the same event;
* **app-errors restarted once by both arms** instead of left to a person by both;
* both leanings against goodput at once.

Kept apart from `goodput_sim.py` (command line, report) so that each file stays small.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks._sim_classes import LatencyFile
from benchmarks._sim_model import Failure, SimParams, simulate

CONSERVATIVE = "node-loss-conservative"


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _variants(params: SimParams, source: LatencyFile | None) -> dict[str, tuple[str, SimParams]]:
    out = {"as configured": ("the run above", params)}
    conservative = source.variants.get(CONSERVATIVE) if source else None
    slow = params
    if conservative is not None:
        slow = dataclasses.replace(params, class_latency=tuple(
            (c, conservative.detection_p50_s if c == conservative.cls else d, a) for c, d, a in params.class_latency))
        out["node loss at SlurmdTimeout 300 s"] = (
            f"goodput's {conservative.cls} detection {conservative.detection_p50_s:g} s: {conservative.source}", slow)
    running = dataclasses.replace(params, seed_clock_ends="running")
    out["other system's clock ends at running"] = (
        "its 94 s ends at the job running again: its requeue is inside it, not added", running)
    if conservative is not None:
        out["both of the above"] = ("node loss at 300 s and the other clock ending at running",
                                    dataclasses.replace(slow, seed_clock_ends="running"))
    flip = "restart" if params.app_errors == "person" else "person"
    out[f"app-errors {'restarted once' if flip == 'restart' else 'left to a person'} by both"] = (
        "each automated arm restarts an app-error once with its own requeue (as a crash) and that clears it"
        if flip == "restart" else "a person fixes every app-error in both automated arms",
        dataclasses.replace(params, app_errors=flip))
    return out


def evaluate_variants(params: SimParams, histories: Sequence[Sequence[Failure]],
                      source: LatencyFile | None) -> dict[str, Any]:
    gpu_hours = params.gpus * params.horizon_s / 3600.0
    rows = []
    for name, (about, v) in _variants(params, source).items():
        seed = [simulate(h, v, "seed")["productive"] / v.horizon_s for h in histories]
        good = [simulate(h, v, "goodput")["productive"] / v.horizon_s for h in histories]
        gain = [g - s for g, s in zip(good, seed, strict=True)]
        rows.append({
            "variant": name, "about": about,
            "seed_clock_ends": v.seed_clock_ends, "app_errors": v.app_errors,
            "node_failure_detection_p50_s": dict((c, d) for c, d, _ in v.class_latency).get("node-failure"),
            "ettr_seed": statistics.fmean(seed), "ettr_goodput": statistics.fmean(good),
            "gain": statistics.fmean(gain), "gain_std": _sd(gain), "gain_min": min(gain),
            "gpu_hours_saved": statistics.fmean(gain) * gpu_hours,
        })
    return {"rows": rows}


def render_variants(variants: dict[str, Any]) -> list[str]:
    lines = ["", "fairness rows (the two automated arms on the same failures; the other system's 69 s / 94 s "
                 "are unpublished means, not measured here):",
             f"{'variant':<40}{'ETTR other':>11}{'ETTR goodput':>14}{'goodput - other':>22}{'GPU-h saved':>13}"]
    for row in variants["rows"]:
        lines.append(f"{row['variant']:<40}{row['ettr_seed']:>11.4f}{row['ettr_goodput']:>14.4f}"
                     f"{row['gain']:>+13.4f} ± {row['gain_std']:.4f}{row['gpu_hours_saved']:>13,.0f}")
    lines += [f"  {row['variant']}: {row['about']}" for row in variants["rows"][1:]]
    return lines
