"""Where an incident's time goes on the straight path, step by step, from its history.

Why: issue #29's storm requeued a 100-job burst at a p50 of 18 s while one incident alone takes
1.5 s, and counts (tasks, events, RPCs) do not say which step waits. Each incident's history
already holds when each step was asked for and when it answered, so `storm-lab` reads, per
incident: the first anomaly sent (the injector's clock) → the workflow started → its first
workflow task picked up by a worker, and completed → the coalesce timer fired → `attribute`
scheduled and completed → `consult_node_memory` likewise (or `consult_memory_and_trust`, both in
one round trip, under `fewer-steps`) → `consult_trust` likewise → `resume` scheduled and taken by
a worker → its `scontrol requeue` run (the storm's command shims log it) → slurmctld's own
`Requeuing` line, logged once the job's processes ended and its epilog ran. A local step is asked
for when its marker says the worker scheduled it; its end is not read. A milestone an incident did
not pass (no trust consult, a local activity) is left out and the segment spans to the next one
it did pass, under that pair's name. All on one machine's clock (the server's event times, the
injector's, the shims' and slurmctld's wall time).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from benchmarks._history_costs import local_activity

# The local steps between the consult and `resume` (the kill switch's read, the checkpoint's
# lookup) run inside the workflow task that completes the consult's answer: only when each was
# asked is known, which splits that task's wait from its steps.
STEPS = ("attribute", "consult_memory_and_trust", "consult_node_memory", "consult_trust", "consult_kill_switch",
         "find_checkpoint", "resume")
ORDER = ("sent", "opened", "first task picked", "first task", "coalesced",
         *(f"{s} {e}" for s in STEPS for e in ("asked", "started", "done")
                           if (s, e) != ("resume", "done")), "requeue sent", "requeued")


def milestones(events: Iterable[HistoryEvent], sent: float | None, requeued: float | None,
               requeue_sent: float | None = None) -> dict[str, float]:
    """Epoch seconds of each milestone this incident passed (the first time it passed it);
    `requeue_sent`: when the worker ran `scontrol requeue` for the job, where that is known."""
    found: dict[str, float] = {}
    if sent is not None:
        found["sent"] = sent
    names: dict[int, str] = {}
    resume_asked = False  # later steps (the track record told at the close) are not on the path
    for event in events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        at = event.event_time.ToDatetime(UTC).timestamp()
        if kind == "WORKFLOW_EXECUTION_STARTED":
            found.setdefault("opened", at)
        elif kind == "WORKFLOW_TASK_STARTED":
            found.setdefault("first task picked", at)
        elif kind == "WORKFLOW_TASK_COMPLETED":
            found.setdefault("first task", at)
        elif kind == "TIMER_FIRED":
            found.setdefault("coalesced", at)
        elif kind == "ACTIVITY_TASK_SCHEDULED":
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            names[event.event_id] = name
            if name in STEPS and not resume_asked:
                found.setdefault(f"{name} asked", at)
            resume_asked = resume_asked or name == "resume"
        elif kind in ("ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_COMPLETED"):
            # A started event is written when the attempt ends, stamped when a worker took it.
            started = kind == "ACTIVITY_TASK_STARTED"
            name = names.get(event.activity_task_started_event_attributes.scheduled_event_id if started
                             else event.activity_task_completed_event_attributes.scheduled_event_id, "")
            if name == "resume" and not started:  # done after slurmctld requeued: the requeue is the milestone
                break
            if name in STEPS:
                found.setdefault(f"{name} {'started' if started else 'done'}", at)
        elif _local_step(event, at, found) == "resume":
            break
    if requeue_sent is not None:
        found["requeue sent"] = requeue_sent
    if requeued is not None:
        found["requeued"] = requeued
    return found


def _local_step(event: HistoryEvent, at: float, found: dict[str, float]) -> str | None:
    """When a local step was asked for, from its marker (written when its workflow task completes,
    it carries the step's `original_schedule_time`); the step's name, if on the path. Its
    `complete_time` is not read: in storms it came out before the schedule time (2026-12-04)."""
    local = local_activity(event)
    step = str(local.get("activity_type")) if local is not None else ""
    if local is None or step not in STEPS:
        return None
    found.setdefault(f"{step} asked", _epoch(local.get("original_schedule_time"), at))
    return step


def _epoch(stamp: object, default: float) -> float:
    """A marker's protobuf-JSON timestamp ({"seconds", "nanos"}) in epoch seconds."""
    seconds = stamp.get("seconds") if isinstance(stamp, dict) else None
    nanos = stamp.get("nanos") if isinstance(stamp, dict) else None
    if isinstance(seconds, int):
        return seconds + (nanos if isinstance(nanos, int) else 0) / 1e9
    return default


def segments(passed: Mapping[str, float]) -> dict[str, float]:
    """Seconds between consecutive milestones passed, named `from → to`."""
    present = [m for m in ORDER if m in passed]
    return {f"{a} → {b}": passed[b] - passed[a] for a, b in itertools.pairwise(present)}


def breakdown(incidents: Iterable[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per segment over the incidents that passed both its ends: n, p50 and p99 seconds, and the
    mean (the means of the segments on one path add up to that path's mean)."""
    spans: dict[str, list[float]] = {}
    for passed in incidents:
        for name, value in segments(passed).items():
            spans.setdefault(name, []).append(value)
    ranked = sorted(spans.items(), key=lambda kv: _rank(kv[0]))
    return {name: {"n": len(values), "p50": round(_q(values, 0.50), 3), "p99": round(_q(values, 0.99), 3),
                   "mean": round(statistics.fmean(values), 3)} for name, values in ranked}


def shown(round_: Mapping[str, Any]) -> list[str]:
    """A round's breakdown as text lines, for the benchmark's printed table."""
    head = f"  straight path, {round_['arrival']} × {round_['workers']} worker(s): segment p50 / p99 / mean s (n)"
    return [head, *(f"    {name:<52}{c['p50']:>8.2f}{c['p99']:>8.2f}{c['mean']:>8.2f}  ({c['n']})"
                    for name, c in round_["straight_path_s"].items())]


def _rank(name: str) -> tuple[int, int]:
    a, _, b = name.partition(" → ")
    return ORDER.index(a), ORDER.index(b)


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
