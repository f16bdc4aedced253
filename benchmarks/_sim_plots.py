"""The two figures of `benchmarks.goodput_sim`: ETTR against checkpoint interval, and the lost-time breakdown.

Kept apart so that matplotlib is imported only when `--plots` asks for figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LABELS = {
    "manual": "(a) no automation\n(people)",
    "seed": "(b) other system\n(69 s / 94 s, unpublished means)",
    "goodput": "(c) goodput",
}
COLORS = {"manual": "#c0392b", "seed": "#e67e22", "goodput": "#27ae60"}
PHASE_COLORS = {
    "lost_progress": "#8e44ad",
    "detection": "#c0392b",
    "action": "#e67e22",
    "spare_wait": "#7f8c8d",
    "requeue": "#2980b9",
    "restart": "#16a085",
    "checkpoint_save": "#bdc3c7",
}


def write_plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    p = result["params"]
    subtitle = (
        f"{p['gpus']:,} GPUs, {p['days']:g} days, MTTF {result['job_mttf_h']:.2f} h, "
        f"restart {p['restart_min']:g} min, {p['reps']} replications"
    )
    paths = []

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    sweep = result["sweep"]
    xs = [row["ckpt_interval_min"] for row in sweep]
    for m in ("manual", "seed", "goodput"):
        mean = [row[f"ettr_{m}"] for row in sweep]
        sd = [row[f"ettr_{m}_std"] for row in sweep]
        ax.plot(xs, mean, marker="o", color=COLORS[m], label=LABELS[m])
        ax.fill_between(
            xs,
            [a - b for a, b in zip(mean, sd, strict=True)],
            [a + b for a, b in zip(mean, sd, strict=True)],
            color=COLORS[m],
            alpha=0.15,
        )
    ax.set_xlabel("checkpoint interval (minutes)")
    ax.set_ylabel("ETTR (kept training time / wall time)")
    ax.set_title(f"Simulated ETTR vs checkpoint interval\n{subtitle}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out_dir / "goodput-ettr.png"
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    models = ["manual", "seed", "goodput"]
    bottoms = [0.0] * len(models)
    for phase, color in PHASE_COLORS.items():
        vals = [result["models"][m]["lost_gpu_hours"][phase] / 1e6 for m in models]
        ax.bar([LABELS[m] for m in models], vals, bottom=bottoms, color=color, label=phase.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    for i, m in enumerate(models):
        ax.text(i, bottoms[i], f"ETTR {result['models'][m]['ettr']:.3f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("GPU-hours lost (millions)")
    ax.set_title(f"Where the time goes, checkpoint every {p['ckpt_interval_min']:g} min\n{subtitle}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_ylim(0, max(bottoms) * 1.12)
    fig.tight_layout()
    path = out_dir / "goodput-lost-time.png"
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
    return paths
