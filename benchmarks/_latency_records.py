"""What Slurm itself recorded, and when: the action side of the latency benchmark's clock.

The latency benchmark times an action to the moment slurmctld logged it, not to an entry in
goodput's own timeline, so a timeline written early (or late) cannot flatter the figure. slurmctld's
log is read by benchmarks._slurm_lab (one reader for both lab benchmarks); what the latency
benchmark makes of those events, of its jobs' output and of its samples is here, pure, so that
tests can check it on recorded lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from benchmarks._harness import summary
from benchmarks._slurm_lab import SlurmEvent, SlurmEventKind

CLASSES = ("xid-kernel-log", "crash", "hang", "node-failure", "app-error", "slow-phase", "node-loss", "straggler",
           "straggler-balanced")
"""`straggler-balanced` runs with `straggler` (balanced jobs beside the slowed ones: any incident is a
false alarm); it is not a class of its own to ask for."""

# One progress line of the benchmark's job: "run <job id>-<restart count> iteration <n>/ ...".
_PROGRESS = re.compile(r"^run (\d+)-(\d+) iteration (\d+)/", re.MULTILINE)


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

    A sample carries `class`, `handled` (bool), `lab_failed` (why, when the lab never ran it) and,
    when measured, `detection_s`, `action_s`, `resume_s`, `drain_s`. A class without a measured
    value reports null, never a guess."""
    table: dict[str, dict[str, Any]] = {}
    for name in classes:
        # A job the lab never ran (a straggler job without every rank printing) is the lab's failure,
        # not goodput's: out of n, counted apart.
        rows = [s for s in samples if s["class"] == name and not s.get("lab_failed")]
        lab_failed = sum(1 for s in samples if s["class"] == name and s.get("lab_failed"))

        def values(key: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [float(r[key]) for r in rows if r.get(key) is not None]

        detection, action, resume, drain = values("detection_s"), values("action_s"), values("resume_s"), \
            values("drain_s")
        table[name] = {
            "n": len(rows), "handled": sum(1 for r in rows if r.get("handled")),
            "detection_p50_s": _p(detection, "p50"), "detection_p99_s": _p(detection, "p99"),
            "action_p50_s": _p(action, "p50"), "action_p99_s": _p(action, "p99"),
            "resume_p50_s": _p(resume, "p50"), "drain_p50_s": _p(drain, "p50"),
            "false_alarms": sum(1 for r in rows if r.get("false_alarm")), "lab_failed": lab_failed,
            "outcomes": _count(str(r.get("outcome")) for r in rows),
        }
    return table


def judge(samples: Sequence[dict[str, Any]], events: Sequence[SlurmEvent]) -> None:
    """Action times from slurmctld's log, and whether each fault was handled as planned."""
    for s in samples:
        if s["class"] in ("slow-phase", "straggler", "straggler-balanced"):
            continue  # judged as it ran: no action is the plan, and any incident a false alarm
        fault_at: datetime = s["fault_at"]
        resumed_as = s.get("resumed_as")
        copy = resumed_as[0] if resumed_as and resumed_as[0] != s["job"] else None
        drain = first(events, "drain", s["node"], fault_at) if s["node"] else None
        requeue = first(events, "requeue", s["job"], fault_at)
        submit = first(events, "submit", copy, fault_at) if copy else None
        exclude = first(events, "exclude", s["job"], fault_at)
        acted = [e.at for e in (drain, requeue, submit, exclude) if e is not None]
        started = s.get("started_at")
        if acted and started is not None:
            s["action_s"] = (min(acted) - started).total_seconds()
        if drain is not None and started is not None:
            s["drain_s"] = (drain.at - started).total_seconds()
        requeues = sum(1 for e in events if e.kind == "requeue" and e.subject == s["job"] and e.at >= fault_at)
        restarted = requeues + (1 if copy else 0)
        ran_again = bool(resumed_as)
        recovered = s.get("outcome") == "recovered"
        s["slurm"] = {"drained": drain is not None, "requeues": requeues, "copy": copy}
        if s["class"] == "app-error":
            s["handled"] = "started_at" in s and not acted and s.get("outcome") not in (None, "recovered") \
                and not str(s.get("outcome")).startswith("unknown")
        elif s["class"] in ("crash", "hang"):
            s["handled"] = recovered and restarted == 1 and drain is None
        elif s["class"] in ("xid-kernel-log", "node-loss"):
            s["handled"] = recovered and ran_again and restarted <= 1 and drain is not None
        else:  # node-failure: goodput's drain, or Slurm's own DOWN kept the node out first; the
            # requeue of a job on a node that stopped answering is logged only at DOWN, if at all
            s["handled"] = recovered and ran_again and restarted <= 1


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
