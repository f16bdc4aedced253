"""Plots for docs/benchmarks.md from the JSON results that `make bench` saves in docs/results/.

`python -m benchmarks.plots` redraws every figure whose results file exists; the goodput
simulation draws its own figures (`python -m benchmarks goodput --plots`). The latency figure
shows each fault class from the newest `latency` run that had n >= 20 of it (LATENCY_RUNS), so a
class rerun on its own at n = 20 replaces the combined run's n = 5.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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


# The `latency` runs of goodput as shipped on Slurm 22.05 whose classes the figure may show: the
# combined run and the classes run again on their own at n = 20 (docs/benchmarks.md says why each).
# Runs of another Slurm, or with its expedited requeue, measure something else and stay out.
LATENCY_RUNS = ("latency", "latency-node-loss", "latency-xid-node-failure", "latency-node-failure-20",
                "latency-straggler-after-node-loss")
LATENCY_CLASSES = ("xid-kernel-log", "crash", "hang", "node-failure", "node-loss", "straggler", "app-error")
# Fewer samples than this make a p99 the slowest sample or two: a class shows such a run only when
# it was never run with more.
FULL_N = 20


@dataclass(frozen=True)
class ClassRun:
    """One class's row of one `latency` result file, and where it came from."""

    kind: str
    source: str
    commit: str
    date: str
    row: dict[str, Any]

    @property
    def n(self) -> int:
        return int(self.row.get("n") or 0)

    def label(self, mark: int) -> str:
        return f"{self.kind}\nn = {self.n}, {self.row.get('handled', 0)} handled\n[{mark}] {self.commit}"


def short_commit(commit: str) -> str:
    """`82bf19b34205` → `82bf19b`, keeping a `+dirty` mark."""
    sha, dirty, _ = commit.partition("+dirty")
    return sha[:7] + ("+dirty" if dirty else "")


def latency_per_class(runs: dict[str, dict[str, Any]]) -> dict[str, ClassRun]:
    """Per class, the run the figure shows: the newest with n >= FULL_N, else the one with the
    most samples (the newest of those). `runs` maps a result file's name to its contents."""
    chosen: dict[str, ClassRun] = {}
    for kind in LATENCY_CLASSES:
        found = [ClassRun(kind, name, short_commit(str(result.get("commit", "?"))),
                          str(result.get("environment", {}).get("date", "")), result["classes"][kind])
                 for name, result in runs.items() if (result.get("classes") or {}).get(kind, {}).get("n")]
        full = [run for run in found if run.n >= FULL_N]
        if full:
            chosen[kind] = max(full, key=lambda run: run.date)
        elif found:
            chosen[kind] = max(found, key=lambda run: (run.n, run.date))
    return chosen


def latency(runs: dict[str, dict[str, Any]], out: Path | None = None) -> None:
    chosen = latency_per_class(runs)
    if not chosen:
        return
    kinds = [k for k in LATENCY_CLASSES if k in chosen]
    fig, ax = plt.subplots(figsize=(10.5, 4.6))
    width = 0.25
    for i, (metric, color) in enumerate((("detection", "#4477aa"), ("action", "#cc6677"), ("resume", "#228833"))):
        values = [chosen[k].row.get(f"{metric}_p50_s") for k in kinds]
        ax.bar([x + i * width for x in range(len(kinds))], [float("nan") if v is None else v for v in values],
               width, label=f"{metric} p50", color=color)
    sources = list(dict.fromkeys(chosen[k].source for k in kinds))  # each file once, in the classes' order
    marks = {source: i + 1 for i, source in enumerate(sources)}
    ax.set_xticks([x + width for x in range(len(kinds))],
                  [chosen[k].label(marks[chosen[k].source]) for k in kinds], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.axhline(69, color="grey", linestyle=":", linewidth=1)
    ax.axhline(94, color="grey", linestyle="--", linewidth=1)
    ax.set_title("goodput as shipped (Slurm 22.05, SlurmdTimeout 300 s): fault → incident → Slurm's record of the "
                 f"action → running again\nper class its newest run with n ≥ {FULL_N} (source file and commit below); "
                 "seed: 69 s / 94 s dotted / dashed; app-error: no action by design; straggler: named, not acted on")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
    first = {chosen[k].source: chosen[k] for k in reversed(kinds)}
    notes = [f"[{marks[s]}] {s}.json ({first[s].commit}, {first[s].date[:10]})" for s in sources]
    fig.text(0.01, 0.01, "docs/results/: " + "\n".join("   ".join(notes[i:i + 3]) for i in range(0, len(notes), 3)),
             fontsize=6.5, color="#333333")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out or IMG / "latency.png", dpi=110)
    plt.close(fig)


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    for name, draw in (("temporal", temporal), ("watch", watch)):
        result = _load(name)
        if result is not None:
            draw(result)
            print(f"drew {name}")
    runs = {name: result for name in LATENCY_RUNS if (result := _load(name)) is not None}
    if runs:
        latency(runs)
        print(f"drew latency from {', '.join(runs)}")


if __name__ == "__main__":
    main()
