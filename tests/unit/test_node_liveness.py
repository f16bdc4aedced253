"""The heartbeat tracker and the corroboration rule: a silent agent alone never opens an incident."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.detect.node_liveness import (
    JobOutput,
    LivenessConfig,
    LivenessTracker,
    OutputRhythm,
    SizeHistory,
    corroborate,
    heartbeat_authentic,
    heartbeat_token,
    peer_lines,
)
from goodput.models import AnomalyKind, Category
from goodput.scheduler import JobInfo, JobState, NodeInfo

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
CONFIG = LivenessConfig(missed=3)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(job_id: str = "41", nodes: tuple[str, ...] = ("node3",), state: JobState = JobState.RUNNING) -> JobInfo:
    return JobInfo(job_id=job_id, state=state, nodes=nodes, comment="goodput:opt-in", restart_count=1)


def tracker_with(*nodes: str, at_s: float = 0.0, interval_s: float = 2.0) -> LivenessTracker:
    tracker = LivenessTracker(CONFIG)
    for node in nodes:
        tracker.beat(node, at(at_s), interval_s)
    return tracker


def test_a_node_is_suspect_only_after_missed_intervals() -> None:
    tracker = tracker_with("node1", "node2", "node3", "node4")
    for t in (2, 4):
        for node in ("node1", "node2", "node4"):
            tracker.beat(node, at(t), 2.0)
    assert tracker.verdict(at(5.9)).suspects == ()
    verdict = tracker.verdict(at(6.0))
    assert [s.node for s in verdict.suspects] == ["node3"]
    assert not verdict.suspended
    assert verdict.suspects[0].last_seen == T0
    assert "no node loss without a second signal" in verdict.note()


def test_the_agents_own_interval_sets_its_deadline() -> None:
    tracker = tracker_with("slow", interval_s=10.0)
    tracker.beat("fast", at(0), 1.0)
    assert [s.node for s in tracker.verdict(at(5)).suspects] == ["fast"]


def test_an_agent_that_restarts_is_no_longer_suspect() -> None:
    tracker = tracker_with("node1", "node2", "node3")
    assert [s.node for s in tracker.verdict(at(7)).suspects] == ["node1", "node2", "node3"]
    for node in ("node1", "node2", "node3"):
        tracker.beat(node, at(8), 2.0)
    assert tracker.verdict(at(9)).suspects == ()


def test_a_head_node_blip_is_not_many_node_losses() -> None:
    tracker = tracker_with("node1", "node2", "node3", "node4")
    tracker.beat("node4", at(5), 2.0)
    verdict = tracker.verdict(at(7))  # three of four silent at once
    assert len(verdict.suspects) == 3
    assert verdict.suspended
    assert "blip" in verdict.note()
    # When they are heard again only the one really gone stays suspect, and counts again.
    for node in ("node1", "node2", "node4"):
        tracker.beat(node, at(8), 2.0)
    verdict = tracker.verdict(at(13))
    assert [s.node for s in verdict.suspects] == ["node3"]
    assert not verdict.suspended


def test_one_silent_agent_of_two_is_not_a_blip() -> None:
    tracker = tracker_with("node1", "node2")
    tracker.beat("node2", at(5), 2.0)
    verdict = tracker.verdict(at(7))
    assert [s.node for s in verdict.suspects] == ["node1"]
    assert not verdict.suspended


def test_the_tracker_is_bounded_and_forgets_long_gone_nodes() -> None:
    tracker = LivenessTracker(LivenessConfig(max_nodes=2, forget_after_s=60))
    assert tracker.beat("a", at(0), 2.0) and tracker.beat("b", at(0), 2.0)
    assert not tracker.beat("c", at(0), 2.0)
    assert tracker.refused == 1 and len(tracker) == 2
    tracker.beat("b", at(50), 2.0)
    tracker.verdict(at(61))
    assert tracker.last_seen("a") is None and len(tracker) == 1
    assert tracker.beat("c", at(61), 2.0)


def test_a_heartbeats_interval_is_clamped() -> None:
    tracker = tracker_with("node1", interval_s=1e9)
    assert tracker.verdict(at(179)).suspects == ()
    assert tracker.verdict(at(180)).suspects != ()


def test_tokens_bind_one_node_of_one_cluster() -> None:
    secret = b"s" * 32
    token = heartbeat_token(secret, "c1", "node3")
    assert heartbeat_authentic(token, secret, "c1", "node3")
    assert not heartbeat_authentic(token, secret, "c1", "node4")
    assert not heartbeat_authentic(token, secret, "c2", "node3")
    assert not heartbeat_authentic(token, b"t" * 32, "c1", "node3")
    assert not heartbeat_authentic("", secret, "c1", "node3")


# -- corroboration ---------------------------------------------------------------------------


def suspect_node3() -> tuple[LivenessTracker, object]:
    tracker = tracker_with("node1", "node2", "node3", "node4")
    for node in ("node1", "node2", "node4"):
        tracker.beat(node, at(6), 2.0)
    (suspect,) = tracker.verdict(at(7)).suspects
    return tracker, suspect


def test_silence_alone_opens_nothing() -> None:
    _, suspect = suspect_node3()
    alive = NodeInfo(name="node3", state="ALLOCATED")
    # The job kept writing after the node went quiet, and no peer complains: an agent problem.
    outputs = [JobOutput(job=job(), written_at=at(6.5), tail="iteration 35\niteration 36\n")]
    assert corroborate(suspect, cluster="c1", node=alive, outputs=outputs, now=at(7), config=CONFIG) == []  # type: ignore[arg-type]
    # Nor when nothing is known of the job's output at all.
    assert corroborate(suspect, cluster="c1", node=alive, outputs=[JobOutput(job=job())], now=at(7),  # type: ignore[arg-type]
                       config=CONFIG) == []


def test_output_that_stopped_with_the_node_corroborates() -> None:
    _, suspect = suspect_node3()
    outputs = [JobOutput(job=job(), written_at=at(-0.2), max_gap_s=0.5)]
    (anomaly,) = corroborate(suspect, cluster="c1", node=NodeInfo(name="node3", state="ALLOCATED"),  # type: ignore[arg-type]
                             outputs=outputs, now=at(7), config=CONFIG)
    assert anomaly.kind is AnomalyKind.NODE_FAILURE and anomaly.category is Category.NODE_FAILURE
    assert anomaly.nodes == ("node3",) and anomaly.job_id == "41" and anomaly.job_attempt == 1
    assert anomaly.evidence[0] == "node loss: node3 (heartbeat missed, corroborated by output)"
    assert anomaly.evidence[1].startswith("heartbeat: agent on node3 silent for 7.0 s")
    assert anomaly.observed_at == T0 and anomaly.detected_at == at(7)


def test_output_quiet_long_before_the_node_went_silent_says_nothing() -> None:
    _, suspect = suspect_node3()
    outputs = [JobOutput(job=job(), written_at=at(-600), max_gap_s=0.5)]  # a job that prints every ten minutes
    assert corroborate(suspect, cluster="c1", node=None, outputs=outputs, now=at(7), config=CONFIG) == []  # type: ignore[arg-type]


def test_slurms_not_responding_corroborates_for_every_job_on_the_node() -> None:
    _, suspect = suspect_node3()
    dead = NodeInfo(name="node3", state="ALLOCATED", flags=("NOT_RESPONDING",))
    outputs = [JobOutput(job=job("41")), JobOutput(job=job("42", nodes=("node3", "node4"))),
               JobOutput(job=job("43", nodes=("node4",))), JobOutput(job=job("44", state=JobState.PENDING))]
    found = corroborate(suspect, cluster="c1", node=dead, outputs=outputs, now=at(7), config=CONFIG)  # type: ignore[arg-type]
    assert [a.job_id for a in found] == ["41", "42"]
    assert "slurm: node node3 ALLOCATED NOT_RESPONDING" in found[0].evidence
    assert found[0].evidence[0].endswith("corroborated by slurm)")


def test_peers_reporting_the_node_lost_corroborate() -> None:
    _, suspect = suspect_node3()
    tail = ("iteration 35\n"
            "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[node3]:35433\n"
            "node30: Connection reset by peer\n")
    multi = job("42", nodes=("node3", "node4"))
    (anomaly,) = corroborate(suspect, cluster="c1", node=None, outputs=[JobOutput(job=multi, written_at=at(6.9),  # type: ignore[arg-type]
                                                                                  tail=tail)],
                             now=at(7), config=CONFIG)
    assert anomaly.evidence[0].endswith("corroborated by peer)")
    assert [e for e in anomaly.evidence if e.startswith("peer:")] == [
        "peer: [rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        "peer [node3]:35433"]


def test_peer_lines_need_the_node_named_as_a_word() -> None:
    assert peer_lines("Connection reset by peer node30\nnode3x broken pipe\n", "node3") == []
    assert peer_lines("NCCL WARN socket closed by node3 (broken pipe)\n", "node3") != []
    assert len(peer_lines("node3: Connection refused\n" * 50, "node3")) == 3


def test_the_anomaly_is_the_same_for_the_same_silence() -> None:
    _, suspect = suspect_node3()
    outputs = [JobOutput(job=job(), written_at=at(-0.2), max_gap_s=0.5)]
    first = corroborate(suspect, cluster="c1", node=None, outputs=outputs, now=at(7), config=CONFIG)  # type: ignore[arg-type]
    later = corroborate(suspect, cluster="c1", node=None, outputs=outputs, now=at(9), config=CONFIG)  # type: ignore[arg-type]
    assert [a.id for a in first] == [a.id for a in later]


@pytest.mark.parametrize("fraction, suspended", [(0.5, True), (0.8, False)])
def test_blip_fraction_is_the_operators_choice(fraction: float, suspended: bool) -> None:
    tracker = LivenessTracker(LivenessConfig(blip_fraction=fraction))
    for node in ("a", "b", "c", "d", "e"):
        tracker.beat(node, at(0), 2.0)
    tracker.beat("d", at(6), 2.0)
    tracker.beat("e", at(6), 2.0)
    assert tracker.verdict(at(7)).suspended is suspended  # three of five silent


def test_output_written_after_the_last_heartbeat_still_stopped_with_the_node() -> None:
    _, suspect = suspect_node3()  # last heard at 0, every 2 s: it may have died at any time up to 2 s
    outputs = [JobOutput(job=job(), written_at=at(1.5), max_gap_s=0.2)]
    assert corroborate(suspect, cluster="c1", node=None, outputs=outputs, now=at(7), config=CONFIG) == []  # type: ignore[arg-type]
    (anomaly,) = corroborate(suspect, cluster="c1", node=None, outputs=outputs, now=at(7.5), config=CONFIG)  # type: ignore[arg-type]
    assert "output: job 41 wrote nothing for 6.0 s (it wrote at least every 0.2 s before)" in anomaly.evidence[2]


def test_a_slow_printer_or_an_unknown_rhythm_is_no_signal() -> None:
    _, suspect = suspect_node3()
    slow = [JobOutput(job=job(), written_at=at(-3), max_gap_s=10.0)]  # prints every 10 s
    assert corroborate(suspect, cluster="c1", node=None, outputs=slow, now=at(7), config=CONFIG) == []  # type: ignore[arg-type]
    assert corroborate(suspect, cluster="c1", node=None, outputs=slow, now=at(27), config=CONFIG) != []  # type: ignore[arg-type]
    unknown = [JobOutput(job=job(), written_at=at(-0.2))]
    assert corroborate(suspect, cluster="c1", node=None, outputs=unknown, now=at(60), config=CONFIG) == []  # type: ignore[arg-type]


def test_the_rhythm_keeps_the_recent_gaps() -> None:
    rhythm = OutputRhythm(written_at=at(0))
    assert rhythm.max_gap_s is None
    for t in (1, 2, 12, 13, 14, 15, 16, 17, 18, 19, 20):
        rhythm = rhythm.observe(at(t))
    assert rhythm.observe(at(5)) == rhythm  # an older time changes nothing
    assert rhythm.max_gap_s == 1.0  # the 10 s gap has aged out of the last eight
    assert rhythm.observe(at(30)).max_gap_s == 10.0


def test_a_files_size_when_the_node_was_last_heard() -> None:
    history = SizeHistory()
    assert history.offset_at(at(0)) is None
    for t, size in ((-2, 100), (-1, 150), (1, 180)):
        history = history.observe(at(t), size)
    assert history.observe(at(1), 180) == history
    assert history.offset_at(at(0)) == 150 and history.offset_at(at(-1.5)) == 100
    assert history.offset_at(at(-3)) is None
    for t in range(100):
        history = history.observe(at(10 + t), 200 + t)
    assert len(history.points) == 32 and history.offset_at(at(0)) is None  # bounded; too far back is unknown


def test_a_node_restored_after_a_loss_is_alive_from_its_first_heartbeat() -> None:
    """#33: node3 lost at 0 (its agent with it), restored; jobs placed on it from 40 s. Until its agent
    beats again it is a suspect with its old last-seen time, and those jobs cannot corroborate that
    old silence: they wrote after it, and nothing of a file first seen after it is read for peers."""
    tracker, suspect = suspect_node3()
    history = SizeHistory()
    for t in range(40, 50):
        history = history.observe(at(t), 100 * (t - 39))
    assert history.offset_at(suspect.last_seen) is None  # type: ignore[attr-defined]  # so the monitor reads no tail
    fresh = job("77", nodes=("node3", "node4"))
    outputs = [JobOutput(job=fresh, written_at=at(49.8), max_gap_s=0.2, tail="")]
    alive = NodeInfo(name="node3", state="MIXED")
    assert corroborate(suspect, cluster="c1", node=alive, outputs=outputs, now=at(50), config=CONFIG) == []  # type: ignore[arg-type]
    # Quiet for a while (a loaded machine): still written long after the old silence began.
    assert corroborate(suspect, cluster="c1", node=alive, outputs=outputs, now=at(70), config=CONFIG) == []  # type: ignore[arg-type]
    for node in ("node1", "node2", "node4"):
        tracker.beat(node, at(50), 2.0)
    tracker.beat("node3", at(50), 2.0)  # the restored agent's first heartbeat
    assert tracker.verdict(at(51)).suspects == ()
