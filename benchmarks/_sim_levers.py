"""The two levers beyond detection speed, each measured on its own: the checkpoint interval and a hot-spare pool.

The main comparison of `benchmarks.goodput_sim` shows that detecting and acting in seconds instead
of minutes moves ETTR by about a point; lost work, restarts and waiting for capacity dominate. These
rows show what the next two levers are worth, on the same failure histories (common random numbers)
and goodput's response model, one lever at a time, so every gain is a paired difference:

* **checkpoint interval**: Daly's optimum from the run's save cost and job MTTF
  (`goodput.checkpoints.advice.daly_interval_s`, what `goodput advise` recommends) instead of the
  configured interval;
* **hot-spare pool**: on a busy shared cluster a replacement node comes through the queue (median
  `queue_wait_min`, an assumption the output states); with goodput holding healthy spares in a
  Slurm reservation the replacement starts at once, while the pool lasts (its size and refill are
  the simulation's spares and repairs, so an exhausted pool still waits for a repair).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks._sim_model import Failure, SimParams, queue_draws, simulate
from goodput.checkpoints.advice import daly_interval_s

LEVERS = ("as configured", "checkpoint interval", "hot-spare pool", "both")
DEFAULT_QUEUE_WAIT_MIN = 30.0


MIN_INTERVAL_MIN = 1.0


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def evaluate_levers(params: SimParams, histories: Sequence[Sequence[Failure]], seeds: Sequence[int],
                    queue_wait_min: float = DEFAULT_QUEUE_WAIT_MIN) -> dict[str, Any]:
    base = dataclasses.replace(params, queue_wait_min=queue_wait_min, hot_spares=False)
    # A free save (--ckpt-save-s 0) has no optimum: Daly's interval is 0, which the model cannot run.
    # One minute stands for "as often as you like".
    daly_min = max(daly_interval_s(params.ckpt_save_s, params.mttf_h * 3600.0) / 60.0, MIN_INTERVAL_MIN)
    variants = {
        "as configured": base,
        "checkpoint interval": dataclasses.replace(base, ckpt_interval_min=daly_min),
        "hot-spare pool": dataclasses.replace(base, hot_spares=True),
        "both": dataclasses.replace(base, ckpt_interval_min=daly_min, hot_spares=True),
    }
    waits = [queue_draws(seed, len(history)) for seed, history in zip(seeds, histories, strict=True)]
    ettr = {name: [simulate(h, v, "goodput", q)["productive"] / v.horizon_s for h, q in zip(histories, waits,
                                                                                             strict=True)]
            for name, v in variants.items()}
    gpu_hours = params.gpus * params.horizon_s / 3600.0
    rows = []
    for name, variant in variants.items():
        gain = [a - b for a, b in zip(ettr[name], ettr["as configured"], strict=True)]
        rows.append({
            "lever": name,
            "ckpt_interval_min": variant.ckpt_interval_min,
            "hot_spares": variant.hot_spares,
            "ettr": statistics.fmean(ettr[name]),
            "ettr_std": _sd(ettr[name]),
            "gain": statistics.fmean(gain),
            "gain_std": _sd(gain),
            "gpu_hours_saved": statistics.fmean(gain) * gpu_hours,
        })
    return {"queue_wait_min": queue_wait_min, "daly_interval_min": daly_min, "rows": rows}


def render_levers(levers: dict[str, Any]) -> list[str]:
    lines = ["", f"levers beyond detection (goodput's latencies; a replacement node waits a median "
                 f"{levers['queue_wait_min']:g} min in a shared queue unless a hot spare is held; "
                 f"Daly interval {levers['daly_interval_min']:.1f} min):",
             f"{'lever':<22}{'interval min':>14}{'ETTR':>10}{'gain (paired)':>22}{'GPU-h saved':>14}"]
    for row in levers["rows"]:
        lines.append(f"{row['lever']:<22}{row['ckpt_interval_min']:>14.1f}{row['ettr']:>10.4f}"
                     f"{row['gain']:>+13.4f} ± {row['gain_std']:.4f}{row['gpu_hours_saved']:>14,.0f}")
    return lines
