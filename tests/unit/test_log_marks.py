"""A log watcher resumed from a stale cursor: lines already sent are not sent again, and new lines
read in the same batch are not lost under the old anomaly's id (goodput.detect.log_marks).

Real files and the real tailer: the stale cursor is the one taken before the first Xid line was
read, as a heartbeat Temporal had not sent yet when the worker died would leave it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.cli.anomaly_input import AnomalyInputError, from_mapping
from goodput.detect.live import LiveLogDetector, LiveState
from goodput.detect.log_marks import MAX_MARKS, merge, replays
from goodput.detect.logtail import LogTailer, TailCursor
from goodput.models import Anomaly, IncidentKey, LogMark

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
KEY = IncidentKey(cluster="lab", job_id="1001", job_attempt=0)
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID_48 = ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, "
          "An uncorrectable double bit error (DBE) has been detected.")
STEP = "iteration {}/ 100 | elapsed time per iteration (ms): 100.0"


def append(path: Path, *lines: str) -> None:
    with path.open("a") as out:
        out.writelines(line + "\n" for line in lines)


class Incident:
    """What RecoveryWorkflow's `anomaly` signal keeps: ids seen, evidence, the furthest marks."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.evidence: list[str] = []
        self.marks: tuple[LogMark, ...] = ()

    def signal(self, anomalies: list[Anomaly]) -> None:
        for anomaly in anomalies:
            self.marks = merge(self.marks, anomaly.log_marks)
            if anomaly.id not in self.ids:
                self.ids.add(anomaly.id)
                self.evidence += anomaly.evidence


def watch(log: Path, cursor: TailCursor | None, state: LiveState | None, at: datetime) -> tuple[
        LiveLogDetector, LogTailer]:
    detector = LiveLogDetector(KEY, state or LiveState.model_validate({"progress": {"started_at": T0}}))
    return detector, LogTailer(log, cursor, srun_labels=False, owner_uid=os.getuid())


def crash_after_the_first_xid(log: Path, then: tuple[str, ...] = ()) -> tuple[Incident, TailCursor, LiveState]:
    """The first worker reads a step and the Xid 79 line and sends its anomaly; the last heartbeat
    Temporal got holds the cursor and state from before the Xid line."""
    incident = Incident()
    append(log, STEP.format(1))
    detector, tailer = watch(log, None, None, T0)
    detector.feed(tailer.poll(T0), T0, T0)
    stale_cursor, stale_state = tailer.cursor, detector.state
    append(log, XID_79, *then)
    incident.signal(detector.feed(tailer.poll(T0), T0, T0))
    tailer.close()
    assert incident.evidence[:1] == [XID_79]
    return incident, stale_cursor, stale_state


def resume(log: Path, incident: Incident, cursor: TailCursor, state: LiveState, *,
           told: bool = True) -> list[Anomaly]:
    if told:
        state = state.model_copy(update={"replays": replays(incident.marks, [cursor])})
    detector, tailer = watch(log, cursor, state, T0 + timedelta(seconds=12))
    with tailer:
        sent = detector.feed(tailer.poll(T0), T0, T0)
    incident.signal(sent)
    return sent


def test_a_line_written_while_no_worker_ran_reaches_the_incident_once(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    incident, cursor, state = crash_after_the_first_xid(log)
    append(log, STEP.format(2), XID_48)
    resume(log, incident, cursor, state)
    assert incident.evidence == [XID_79, XID_48]


def test_without_the_marks_the_new_line_is_lost_under_the_old_id(tmp_path: Path) -> None:
    """The failure the marks exist for: the re-read batch is named after the old Xid line."""
    log = tmp_path / "slurm-1001.out"
    incident, cursor, state = crash_after_the_first_xid(log)
    append(log, STEP.format(2), XID_48)
    [sent] = resume(log, incident, cursor, state, told=False)
    assert XID_48 in sent.evidence and incident.evidence == [XID_79]


def test_lines_read_again_still_count_as_progress(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    incident, cursor, state = crash_after_the_first_xid(log)
    incident_marks = incident.marks
    append(log, STEP.format(2))
    state = state.model_copy(update={"replays": replays(incident_marks, [cursor])})
    detector, tailer = watch(log, cursor, state, T0)
    with tailer:
        assert detector.feed(tailer.poll(T0), T0, T0) == []
    assert detector.state.progress.last_step == 2
    assert detector.state.replays == ()  # the step-2 line lies past the mark: the replay is over


def test_a_file_truncated_while_no_worker_ran_is_read_in_full(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    incident, cursor, state = crash_after_the_first_xid(log, then=(STEP.format(2), STEP.format(3)))
    [mark] = incident.marks
    log.write_text("")  # copytruncate: same inode, offsets start again
    # The new Xid line lies inside the byte range the old batch covered: only the line at byte 0,
    # before the resumed cursor, shows that the file is a new text.
    append(log, "y" * (cursor.offset + 5), XID_48)
    assert cursor.offset < len(log.read_bytes()) - len(XID_48) - 1 <= mark.offset
    resume(log, incident, cursor, state)
    assert incident.evidence == [XID_79, XID_48]


def test_a_new_file_under_the_same_name_is_never_skipped(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    incident, cursor, state = crash_after_the_first_xid(log)
    os.rename(log, tmp_path / "slurm-1001.out.1")
    append(log, "z" * (cursor.offset - 1), XID_48)  # where the old Xid line was in the old file
    resume(log, incident, cursor, state)
    assert incident.evidence == [XID_79, XID_48]


def test_merge_keeps_the_furthest_mark_per_file_and_a_bounded_number_of_files() -> None:
    first = LogMark(path="/a", inode=7, device=1, offset=100)
    renamed = LogMark(path="/a.1", inode=7, device=1, offset=50)  # same file, rotated, an older mark
    assert merge((first,), (renamed,)) == (first,)
    many = merge((), (LogMark(path=f"/f{i}", offset=i) for i in range(MAX_MARKS + 5)))
    assert len(many) == MAX_MARKS and many[-1].path == f"/f{MAX_MARKS + 4}"


def test_an_operator_cannot_set_log_marks() -> None:
    with pytest.raises(AnomalyInputError, match="log_marks"):
        from_mapping({"job_id": "1", "kind": "gpu_fault", "log_marks": [{"path": "/x", "offset": 9}]}, T0)
