"""The live log detector: batches of tailed lines in, at most one anomaly per batch out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.detect.hang import HangConfig
from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine
from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import classify_lines
from goodput.models import AnomalyKind, Category, IncidentKey
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)
KEY = IncidentKey(cluster="lab", job_id="42", job_attempt=1)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def lines(*texts: str, start: int = 0) -> list[LogLine]:
    return [LogLine(path="/logs/42.out", offset=(start + i) * 100, line_no=start + i + 1, text=t, observed_at=T0)
            for i, t in enumerate(texts)]


def test_clean_lines_raise_nothing() -> None:
    detector = LiveLogDetector.start(KEY, T0, node="node2")
    assert detector.feed(lines("loading data", "iteration 1/ 10 | loss 2.3"), T0, T0) == []


def test_xid_line_becomes_one_anomaly_naming_the_node_of_a_one_node_job() -> None:
    detector = LiveLogDetector.start(KEY, T0, node="node2")
    [anomaly] = detector.feed(lines("step 1", XID, XID), T0, T0 + timedelta(milliseconds=5))
    assert anomaly.category is Category.GPU_HARDWARE and anomaly.kind is AnomalyKind.GPU_FAULT
    assert anomaly.nodes == ("node2",) and "xid-79" in anomaly.signature_ids
    assert (anomaly.job_id, anomaly.job_attempt, anomaly.cluster) == ("42", 1, "lab")
    assert XID in anomaly.evidence


def test_reread_lines_give_the_same_anomaly_id() -> None:
    """A watcher resumed from an older cursor re-reads lines; the incident dedupes by id."""
    first = LiveLogDetector.start(KEY, T0).feed(lines("x", XID), T0, T0)
    again = LiveLogDetector.start(KEY, T0).feed(lines("x", XID), T0 + timedelta(seconds=9), T0)
    assert first[0].id == again[0].id
    other_attempt = LiveLogDetector.start(KEY.model_copy(update={"job_attempt": 2}), T0).feed(lines("x", XID), T0, T0)
    assert other_attempt[0].id != first[0].id


def test_silence_after_progress_is_one_hang() -> None:
    config = HangConfig(k=5, floor_s=30, startup_grace_s=60)
    detector = LiveLogDetector.start(KEY, T0, hang=config)
    for step in range(1, 11):  # enough intervals to learn the rhythm
        detector.feed(lines(f"iteration {step}/ 100 | elapsed time per iteration (ms): 1000.0"),
                      T0 + timedelta(seconds=step), T0)
    assert detector.tick(T0 + timedelta(seconds=20)) == []
    [hang] = detector.tick(T0 + timedelta(seconds=41))
    assert hang.kind is AnomalyKind.HANG and hang.category is Category.HANG
    assert detector.tick(T0 + timedelta(seconds=90)) == []
    assert detector.state.hang_reported


def test_a_slow_rank_is_one_straggler_anomaly() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    for step in range(1, 12):
        batch = [f" {rank}: iteration {step}/ 100 | elapsed time per iteration (ms): "
                 f"{1600.0 if rank == 5 else 1000.0 + rank}" for rank in range(8)]
        detector.feed(lines(*batch, start=step * 8), T0, T0)
    [straggler] = detector.tick(T0 + timedelta(seconds=12))
    assert straggler.kind is AnomalyKind.STRAGGLER and straggler.ranks == (5,)
    assert "rank 5" in straggler.evidence[0]
    assert detector.tick(T0 + timedelta(seconds=13)) == []


def test_a_straggler_anomaly_makes_the_case_for_excluding_its_node() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    for step in range(1, 12):
        batch = [f"node{rank // 4}: [rank{rank}]: iteration {step}/ 100 | elapsed time per iteration (ms): "
                 f"{1250.0 if rank == 6 else 1000.0}" for rank in range(8)]
        detector.feed(lines(*batch, start=step * 8), T0, T0)
    [straggler] = detector.tick(T0 + timedelta(seconds=12))
    assert straggler.nodes == ("node1",) and straggler.ranks == (6,)
    assert "loses 900 s of step time per hour" in straggler.evidence[0]
    assert "exclude node1 at the job's next restart" in straggler.evidence[0]


def test_a_uniform_fleet_has_no_straggler() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    for step in range(1, 12):
        detector.feed(lines(*[f" {r}: iteration {step}/ 100 | elapsed time per iteration (ms): 1000.0"
                              for r in range(8)], start=step * 8), T0, T0)
    assert [a for a in detector.tick(T0) if a.kind is AnomalyKind.STRAGGLER] == []


def test_a_bare_xid_in_a_jobs_output_naming_another_host_drains_nothing() -> None:
    # Hostile input (#25 reads `XID 79 detected` bare now): the job's own output names a node outside
    # its allocation; from the live detector through attribution the node is reported, never drained.
    job = JobInfo(job_id="42", name="train", state=JobState.FAILED, nodes=("node2",))
    detector = LiveLogDetector.start(KEY, T0)
    [anomaly] = detector.feed(lines("step 1", "gpu-victim-17: XID 79 detected on GPU 3"), T0, T0)
    assert "xid-79" in anomaly.signature_ids and anomaly.nodes == ("gpu-victim-17",)
    verdict = attribute([anomaly], job)
    assert (verdict.drain, verdict.culprit_nodes, verdict.unverified_nodes) == (False, (), ("gpu-victim-17",))


PREFIXED = ["[node-a12] step 7 ok", "[node-b07] step 7 ok", "[node-a12] step 8 ok", "[node-b07] step 8 ok",
            f"[node-a12] {XID}", "[node-b07] step 9 ok", "[node-a12] waiting"]


def test_a_prefix_the_lines_repeat_names_the_node_as_goodput_classify_does() -> None:
    """`[node-a12] ` is no launcher's known prefix: the host is the one the batch's own layout names,
    as the offline reader names it, and attribution drains it because Slurm allocated it."""
    job = JobInfo(job_id="42", name="train", state=JobState.FAILED, nodes=("node-a12", "node-b07"))
    [anomaly] = LiveLogDetector.start(KEY, T0).feed(lines(*PREFIXED), T0, T0)
    assert anomaly.nodes == ("node-a12",) == (classify_lines(PREFIXED).host,)
    verdict = attribute([anomaly], job)
    assert verdict.drain and verdict.culprit_nodes == ("node-a12",)


def test_a_repeated_prefix_naming_a_node_outside_the_allocation_drains_nothing() -> None:
    # Hostile input: the job prints a victim's name as its own line prefix.
    job = JobInfo(job_id="42", name="train", state=JobState.FAILED, nodes=("node2", "node3"))
    forged = [line.replace("node-a12", "gpu-victim-17") for line in PREFIXED]
    [anomaly] = LiveLogDetector.start(KEY, T0).feed(lines(*forged), T0, T0)
    assert anomaly.nodes == ("gpu-victim-17",)
    verdict = attribute([anomaly], job)
    assert (verdict.drain, verdict.culprit_nodes, verdict.unverified_nodes) == (False, (), ("gpu-victim-17",))


def test_a_prefix_seen_too_rarely_names_no_host() -> None:
    # Twice is no layout: `[node-a12] ` must repeat in the window (prefixes.MIN_PREFIX_REPEATS).
    [anomaly] = LiveLogDetector.start(KEY, T0).feed(lines("[node-a12] step 8 ok", f"[node-a12] {XID}"), T0, T0)
    assert anomaly.nodes == ()


def test_a_one_node_job_keeps_its_node_whatever_its_lines_repeat() -> None:
    [anomaly] = LiveLogDetector.start(KEY, T0, node="node2").feed(lines(*PREFIXED), T0, T0)
    assert anomaly.nodes == ("node2",)
