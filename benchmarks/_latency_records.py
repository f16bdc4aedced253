"""What Slurm itself recorded, and when: the action side of the latency benchmark's clock.

The latency benchmark times an action to the moment slurmctld logged it, not to an entry in
goodput's own timeline, so a timeline written early (or late) cannot flatter the figure. slurmctld
stamps each line in local time to the millisecond (its default `LogTimeFormat=iso8601_ms`). The
parsers and the per-class summary are pure, so that tests can check them on recorded lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from benchmarks._harness import summary

SlurmEventKind = Literal["drain", "requeue", "submit", "exclude"]
CLASSES = ("xid-kernel-log", "crash", "hang", "node-failure", "app-error")

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?)\] ")
_EVENTS: tuple[tuple[SlurmEventKind, re.Pattern[str]], ...] = (
    ("drain", re.compile(r"update_node: node (\S+) reason set to: goodput:")),
    ("requeue", re.compile(r"Requeuing JobId=(\d+)\b")),
    ("submit", re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+)\b")),
    # goodput's requeue of a job on a node that stopped answering: Slurm takes the hold and the
    # exclusion at once but logs "Requeuing" only when the node is declared DOWN.
    ("exclude", re.compile(r"_update_job: setting exc_nodes to \S+ for JobId=(\d+)\b")),
)
# One progress line of the benchmark's job: "run <job id>-<restart count> iteration <n>/ ...".
_PROGRESS = re.compile(r"^run (\d+)-(\d+) iteration (\d+)/", re.MULTILINE)


@dataclass(frozen=True)
class SlurmEvent:
    """One action slurmctld logged: a node given goodput's drain reason, a job requeued or submitted."""

    at: datetime
    kind: SlurmEventKind
    subject: str  # node name for drains, job id otherwise


def slurmctld_events(text: str) -> list[SlurmEvent]:
    """The drains (with goodput's reason), requeues, batch submissions and node exclusions in
    slurmctld's log text.

    Lines without a timestamp (a torn last line) are skipped; times are local, made aware."""
    events: list[SlurmEvent] = []
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        for kind, pattern in _EVENTS:
            found = pattern.search(line, stamp.end())
            if found:
                events.append(SlurmEvent(at=datetime.fromisoformat(stamp.group(1)).astimezone(), kind=kind,
                                         subject=found.group(1)))
                break
    return events


def first(events: Iterable[SlurmEvent], kind: SlurmEventKind, subject: str,
          after: datetime | None = None) -> SlurmEvent | None:
    """The earliest event of `kind` about `subject` (at or after `after`, when given)."""
    matching = [e for e in events if e.kind == kind and e.subject == subject and (after is None or e.at >= after)]
    return min(matching, key=lambda e: e.at) if matching else None


def runs_in(output: str) -> dict[tuple[str, int], int]:
    """Each run (job id, restart count) seen in a job's output, with the highest iteration it printed."""
    runs: dict[tuple[str, int], int] = {}
    for match in _PROGRESS.finditer(output):
        key = (match.group(1), int(match.group(2)))
        runs[key] = max(runs.get(key, 0), int(match.group(3)))
    return runs


def resumed_run(output: str, faulted: tuple[str, int], min_iteration: int = 2) -> tuple[str, int] | None:
    """A run other than the faulted one that has made `min_iteration` steps: the job is running again."""
    for run, steps in runs_in(output).items():
        if run != faulted and steps >= min_iteration:
            return run
    return None


def _p(values: Sequence[float], q: str) -> float | None:
    return round(summary(values)[q], 3) if values else None


def per_class(samples: Sequence[dict[str, Any]], classes: Sequence[str] = CLASSES) -> dict[str, dict[str, Any]]:
    """The issue's table: n, handled, detection and action p50/p99, resume p50 per fault class.

    A sample carries `class`, `handled` (bool) and, when measured, `detection_s`, `action_s`,
    `resume_s`, `drain_s`. A class without a measured value reports null, never a guess."""
    table: dict[str, dict[str, Any]] = {}
    for name in classes:
        rows = [s for s in samples if s["class"] == name]

        def values(key: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [float(r[key]) for r in rows if r.get(key) is not None]

        detection, action, resume, drain = values("detection_s"), values("action_s"), values("resume_s"), \
            values("drain_s")
        table[name] = {
            "n": len(rows), "handled": sum(1 for r in rows if r.get("handled")),
            "detection_p50_s": _p(detection, "p50"), "detection_p99_s": _p(detection, "p99"),
            "action_p50_s": _p(action, "p50"), "action_p99_s": _p(action, "p99"),
            "resume_p50_s": _p(resume, "p50"), "drain_p50_s": _p(drain, "p50"),
            "outcomes": _count(str(r.get("outcome")) for r in rows),
        }
    return table


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def clock_gap(probes: Sequence[tuple[float, float, float]]) -> dict[str, float]:
    """Another clock's offset from ours, from (sent, stamped by the other clock, answered) triples
    in epoch seconds: the median of stamp - midpoint, and the largest half round trip as its bound."""
    if not probes:
        return {}
    gaps = sorted(stamp - (sent + answered) / 2 for sent, stamp, answered in probes)
    return {"median_s": round(gaps[len(gaps) // 2], 4),
            "bound_s": round(max((answered - sent) / 2 for sent, _, answered in probes), 4),
            "probes": float(len(probes))}
