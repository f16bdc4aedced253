"""Plots for docs/benchmarks.md from the JSON results that `make bench` saves in docs/results/.

`python -m benchmarks.plots` redraws every figure whose results file exists; the goodput
simulation draws its own figures (`python -m benchmarks goodput --plots`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DOCS = Path(__file__).resolve().parents[1] / "docs"
RESULTS = DOCS / "results"
IMG = DOCS / "img"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def temporal(result: dict[str, Any]) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    storages = [r["storage"] for r in result["results"]]
    left.bar(storages, [r["starts_per_s"] for r in result["results"]], color="#4477aa")
    left.set_title("incident starts/s (burst)")
    for ax_rows, label, color in ((result["results"], "burst", "#cc6677"), (result["isolated"], "isolated", "#228833")):
        right.plot(storages, [r["first_activity_s"]["p50"] * 1000 for r in ax_rows], "o-", color=color,
                   label=f"{label} p50")
        right.plot(storages, [r["first_activity_s"]["p99"] * 1000 for r in ax_rows], "o--", color=color,
                   label=f"{label} p99")
    right.set_yscale("log")
    right.set_ylabel("ms")
    right.set_title("start → first activity")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "temporal-starts.png", dpi=110)
    plt.close(fig)


def watch(result: dict[str, Any]) -> None:
    levels = result["levels"]
    jobs = [r["jobs"] for r in levels]
    fig, left = plt.subplots(figsize=(6, 3.4))
    left.plot(jobs, [r["cpu_cores"] for r in levels], "o-", color="#4477aa", label="worker CPU (cores)")
    left.set_xlabel("jobs watched by one worker")
    left.set_ylabel("CPU cores")
    right = left.twinx()
    right.plot(jobs, [r["detection_s"]["p50"] * 1000 for r in levels], "s--", color="#cc6677",
               label="detection p50 (ms)")
    right.set_ylabel("detection p50 (ms)")
    left.set_title("log watchers per host (2 cores)")
    fig.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "watch-capacity.png", dpi=110)
    plt.close(fig)


def latency(result: dict[str, Any]) -> None:
    classes = result.get("classes", {})
    if not classes:
        return
    kinds = [k for k in ("xid-kernel-log", "crash", "hang", "node-failure", "node-loss", "app-error") if k in classes]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    width = 0.25
    for i, (metric, color) in enumerate((("detection", "#4477aa"), ("action", "#cc6677"), ("resume", "#228833"))):
        values = [classes[k].get(f"{metric}_p50_s") for k in kinds]
        ax.bar([x + i * width for x in range(len(kinds))], [float("nan") if v is None else v for v in values],
               width, label=f"{metric} p50", color=color)
    ax.set_xticks([x + width for x in range(len(kinds))], kinds, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.axhline(69, color="grey", linestyle=":", linewidth=1)
    ax.axhline(94, color="grey", linestyle="--", linewidth=1)
    ax.set_title(f"goodput as shipped (commit {result.get('commit', '?')}): fault → incident → Slurm's record "
                 "of the action → running again\n(seed: 69 s / 94 s dotted/dashed; app-error: no action by design)")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "latency.png", dpi=110)
    plt.close(fig)


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    for name, draw in (("temporal", temporal), ("watch", watch), ("latency", latency)):
        result = _load(name)
        if result is not None:
            draw(result)
            print(f"drew {name}")


if __name__ == "__main__":
    main()
