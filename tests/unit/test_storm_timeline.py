"""storm-lab's straight-path breakdown reads each step's times from an incident's history (#29)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from benchmarks._storm_timeline import breakdown, milestones, segments

T0 = 1_800_000_000.0


def event(event_id: int, kind: int, at: float, **attributes: object) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=kind)
    e.event_time.FromDatetime(datetime.fromtimestamp(T0 + at, UTC))
    for field, value in attributes.items():
        getattr(e, field).CopyFrom(value)
    return e


def scheduled(event_id: int, at: float, name: str) -> HistoryEvent:
    e = event(event_id, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, at)
    e.activity_task_scheduled_event_attributes.activity_type.name = name
    return e


def completed(event_id: int, at: float, of: int) -> HistoryEvent:
    e = event(event_id, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, at)
    e.activity_task_completed_event_attributes.scheduled_event_id = of
    return e


def started(event_id: int, at: float, of: int) -> HistoryEvent:
    e = event(event_id, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, at)
    e.activity_task_started_event_attributes.scheduled_event_id = of
    return e


def marker(event_id: int, at: float, name: str, asked: float, done: float) -> HistoryEvent:
    """A local activity's marker as the SDK writes it (its JSON `data` detail), at its task's end."""
    e = event(event_id, EventType.EVENT_TYPE_MARKER_RECORDED, at)
    e.marker_recorded_event_attributes.marker_name = "core_local_activity"
    stamp = {"seconds": int(T0 + asked), "nanos": round((asked % 1) * 1e9)}
    end = {"seconds": int(T0 + done), "nanos": round((done % 1) * 1e9)}
    data = json.dumps({"seq": 1, "activity_type": name, "original_schedule_time": stamp, "complete_time": end})
    e.marker_recorded_event_attributes.details["data"].payloads.add(data=data.encode())
    return e


def test_local_steps_are_timed_from_their_markers_up_to_the_requeue() -> None:
    history = [
        event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0.5),
        event(6, EventType.EVENT_TYPE_TIMER_FIRED, 1.5),
        marker(9, 3.0, "attribute", asked=1.75, done=2.25),
        marker(10, 3.0, "resume", asked=2.5, done=2.75),  # done after the requeue: not read
        marker(11, 3.0, "consult_trust", asked=2.8, done=2.9),
    ]
    passed = milestones(history, sent=None, requeued=T0 + 4.0, requeue_sent=T0 + 2.625)
    assert {k: round(v - T0, 3) for k, v in passed.items()} == {
        "opened": 0.5, "coalesced": 1.5, "attribute asked": 1.75, "resume asked": 2.5, "requeue sent": 2.625,
        "requeued": 4.0}
    assert segments(passed)["resume asked → requeue sent"] == 0.125
    assert segments(passed)["requeue sent → requeued"] == 1.375  # the job's end and epilog, Slurm's part


def test_each_step_is_timed_from_its_own_events_and_a_step_not_taken_is_spanned() -> None:
    history = [
        event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0.5),
        event(3, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, 2.5),
        event(4, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 3.0),
        event(6, EventType.EVENT_TYPE_TIMER_FIRED, 4.0),
        scheduled(9, 4.5, "attribute"), completed(11, 5.0, 9),
        scheduled(14, 6.0, "consult_node_memory"), completed(16, 8.0, 14),
        scheduled(19, 9.0, "resume"), started(20, 9.5, 19), completed(21, 30.0, 19),  # done: not read
        scheduled(24, 40.0, "consult_trust"),  # told at the close, past the path: not read
    ]
    passed = milestones(history, sent=T0, requeued=T0 + 10.0)
    assert {k: round(v - T0, 3) for k, v in passed.items()} == {
        "sent": 0.0, "opened": 0.5, "first task picked": 2.5, "first task": 3.0, "coalesced": 4.0,
        "attribute asked": 4.5, "attribute done": 5.0, "consult_node_memory asked": 6.0,
        "consult_node_memory done": 8.0, "resume asked": 9.0, "resume started": 9.5, "requeued": 10.0}
    spans = segments(passed)
    assert spans["opened → first task picked"] == 2.0
    assert spans["consult_node_memory done → resume asked"] == 1.0  # no trust consult in this one
    assert round(sum(spans.values()), 6) == 10.0
    summary = breakdown([passed, passed])
    assert next(iter(summary)) == "sent → opened"
    assert summary["consult_node_memory asked → consult_node_memory done"] == {"n": 2, "p50": 2.0, "p99": 2.0,
                                                                              "mean": 2.0}


def test_the_local_steps_after_the_consult_split_its_answers_task() -> None:
    # The consult's answer → its workflow task picked (the kill switch asked) → the switch read (the
    # checkpoint asked) → the lookup and the task's completion (resume asked).
    history = [
        event(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0.5),
        scheduled(14, 1.0, "consult_memory_and_trust"), completed(16, 2.0, 14),
        marker(20, 5.0, "consult_kill_switch", asked=3.5, done=3.6),
        marker(21, 5.0, "find_checkpoint", asked=4.25, done=4.3),
        scheduled(22, 5.0, "resume"),
    ]
    spans = segments(milestones(history, sent=None, requeued=None))
    assert spans["consult_memory_and_trust done → consult_kill_switch asked"] == 1.5
    assert spans["consult_kill_switch asked → find_checkpoint asked"] == 0.75
    assert spans["find_checkpoint asked → resume asked"] == 0.75
