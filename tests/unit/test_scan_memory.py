"""The cluster watcher's heartbeat: what it keeps of a scan reads the same to the next scan as the
whole scan did, and its size follows the watched jobs and dead nodes, not the cluster."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities.watch import WatchActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.logtail import TailCursor
from goodput.detect.scan_memory import MAX_REMEMBERED, ScanMemory, of_scan
from goodput.detect.scheduler_watch import NOT_RESPONDING_HOLD_S, Snapshot, changes, new_running, snapshot
from goodput.detect.watch import ClusterCheckpoint, OptInRule, WatchClusterInput, WatchJobInput
from goodput.models import Anomaly, IncidentKey, LogMark
from goodput.scheduler import JobInfo, JobState, NodeInfo

NOW = datetime(2026, 12, 5, tzinfo=UTC)
NODE_NAMES = [f"gpu-{i}" for i in range(6)]
NODE_STATES = [("ALLOCATED", ()), ("IDLE", ()), ("DOWN", ("NOT_RESPONDING",)), ("DOWN*", ()),
               ("ALLOCATED", ("NOT_RESPONDING",)), ("MIXED", ("DRAIN",)), ("FAIL", ())]
JOB_IDS = [str(100 + i) for i in range(8)]
WATCHED = set(JOB_IDS[:5])

node_state = st.sampled_from(NODE_STATES)
job_state = st.tuples(st.sampled_from(list(JobState)), st.integers(0, 2),
                      st.lists(st.sampled_from(NODE_NAMES), min_size=1, max_size=3, unique=True))
scan = st.tuples(st.dictionaries(st.sampled_from(JOB_IDS), job_state),
                 st.lists(node_state, min_size=len(NODE_NAMES), max_size=len(NODE_NAMES)),
                 st.floats(0, 2 * NOT_RESPONDING_HOLD_S))


Drawn = tuple[dict[str, tuple[JobState, int, list[str]]], list[tuple[str, tuple[str, ...]]], float]


def lists(drawn: Drawn) -> tuple[list[JobInfo], list[NodeInfo], float]:
    jobs, states, gap = drawn
    return ([JobInfo(job_id=i, state=s, restart_count=r, nodes=tuple(n), exit_code="1:0", comment="goodput:opt-in")
             for i, (s, r, n) in jobs.items()],
            [NodeInfo(name=name, state=state, flags=flags, reason="hostile reason text")
             for name, (state, flags) in zip(NODE_NAMES, states, strict=True)], gap)


@settings(max_examples=300, deadline=None)
@given(st.lists(scan, min_size=2, max_size=5))
def test_the_kept_facts_read_as_the_whole_scan_did(scans: list[Drawn]) -> None:
    at = NOW
    full: Snapshot | None = None
    kept: Snapshot | None = None
    for drawn in scans:
        jobs, nodes, gap = lists(drawn)
        at += timedelta(seconds=gap)
        watched = {j.job_id: j for j in jobs if j.job_id in WATCHED}
        now_full = snapshot(jobs, nodes, at=at, previous=full)
        now_kept = snapshot(jobs, nodes, at=at, previous=kept)
        assert now_full == now_kept  # the NOT_RESPONDING clock carries over the same
        if full is not None and kept is not None:
            assert changes(full, now_full, cluster="c", now=at, watched=watched) == \
                changes(kept, now_kept, cluster="c", now=at, watched=watched)
            assert new_running(full, now_full, watched) == new_running(kept, now_kept, watched)
        memory = of_scan(now_kept, watched)
        assert memory is not None
        full, kept = now_full, memory.snapshot()


def big_cluster() -> tuple[list[JobInfo], list[NodeInfo]]:
    nodes = [NodeInfo(name=f"gpu-{i:05d}", state="ALLOCATED", gres="gpu:h100:8(S:0-1)") for i in range(10_000)]
    nodes[17] = NodeInfo(name="gpu-00017", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding")
    running = [JobInfo(job_id=str(100_000 + j), name=f"train-{j}", state=JobState.RUNNING, partition="batch",
                       nodes=tuple(f"gpu-{(j * 8 + k) % 10_000:05d}" for k in range(8)), comment="goodput:opt-in",
                       requeue=True, stdout_path=f"/home/user{j}/runs/slurm-{100_000 + j}.out",
                       command=f"/home/user{j}/runs/train.sbatch", work_dir=f"/home/user{j}/runs")
               for j in range(1_250)]
    pending = [JobInfo(job_id=str(200_000 + j), name="sweep", state=JobState.PENDING, partition="batch",
                       stdout_path=f"/home/other/slurm-{200_000 + j}.out", work_dir="/home/other")
               for j in range(20_000)]
    return running + pending, nodes


def heartbeat_bytes(checkpoint: ClusterCheckpoint) -> int:
    return len(pydantic_data_converter.payload_converter.to_payloads([checkpoint])[0].data)


def test_a_10000_node_cluster_heartbeats_kilobytes_not_the_whole_scan() -> None:
    jobs, nodes = big_cluster()
    scan = snapshot(jobs, nodes, at=NOW)
    watched = {j.job_id: j for j in jobs if j.comment}
    memory = of_scan(scan, watched)
    assert memory is not None and len(memory.jobs) == 1_250 and list(memory.dead_nodes) == ["gpu-00017"]
    # The whole scan is past Temporal's 2 MB limit on heartbeat details: the watcher would fail.
    assert heartbeat_bytes(ClusterCheckpoint(previous=scan)) > 2 * 1024 * 1024
    assert heartbeat_bytes(ClusterCheckpoint(memory=memory)) < 100 * 1024


def test_ended_jobs_are_kept_so_a_job_opted_in_later_is_not_reported_twice() -> None:
    failed = JobInfo(job_id="9", state=JobState.FAILED, nodes=("gpu-1",))
    first = snapshot([failed], [], at=NOW)
    memory = of_scan(first, watched=())
    assert memory is not None and memory.jobs == {"9": (JobState.FAILED, 0)}
    assert changes(memory.snapshot(), snapshot([failed], [], at=NOW), cluster="c", now=NOW,
                   watched={"9": failed}) == []


def test_past_the_bound_nothing_is_kept_and_the_retry_takes_a_fresh_baseline() -> None:
    jobs = [JobInfo(job_id=str(i), state=JobState.RUNNING) for i in range(MAX_REMEMBERED + 1)]
    scan = snapshot(jobs, [], at=NOW)
    assert of_scan(scan, {j.job_id for j in jobs}) is None
    assert of_scan(scan, {j.job_id for j in jobs[:MAX_REMEMBERED]}) is not None


def test_an_older_workers_heartbeat_is_still_read() -> None:
    scan = snapshot([JobInfo(job_id="3", state=JobState.RUNNING)], [NodeInfo(name="gpu-1", state="IDLE")], at=NOW)
    payload = pydantic_data_converter.payload_converter.to_payloads([{"previous": scan.model_dump(mode="json"),
                                                                      "scans": 4}])[0]
    [old] = pydantic_data_converter.payload_converter.from_payloads([payload], [ClusterCheckpoint])
    assert isinstance(old, ClusterCheckpoint) and old.last_scan() == scan and old.scans == 4
    assert ClusterCheckpoint().last_scan() is None


class Collected:
    """The activity's sink and launcher: what it reported and which log watchers it started."""

    def __init__(self) -> None:
        self.anomalies: list[Anomaly] = []
        self.launched: list[str] = []

    async def submit(self, anomaly: Anomaly) -> None:
        self.anomalies.append(anomaly)

    async def launch(self, request: WatchJobInput) -> None:
        self.launched.append(request.job.job_id)

    async def handover(self, cluster: str, job_id: str, attempt: int, wait_s: float) -> tuple[TailCursor, ...]:
        return ()

    async def delivered(self, key: IncidentKey) -> tuple[LogMark, ...]:
        return ()


async def one_scan_resumed_from(memory: ScanMemory) -> tuple[Collected, list[ClusterCheckpoint]]:
    """The cluster watch activity retried with `memory` as its last heartbeat, run for one scan."""
    fake = FakeScheduler()
    fake.set_job_state("1002", JobState.FAILED, exit_code="1:0")
    out = Collected()
    beats: list[ClusterCheckpoint] = []
    env = ActivityEnvironment()
    resumed = ClusterCheckpoint(memory=memory).model_dump(mode="json")
    env.info = dataclasses.replace(env.info, heartbeat_details=[resumed])

    def heartbeat(*details: object) -> None:
        beats.append(ClusterCheckpoint.model_validate(details[0]))
        env.cancel()

    env.on_heartbeat = heartbeat
    with contextlib.suppress(asyncio.CancelledError):
        await env.run(WatchActivities(fake, out, out).watch_scheduler,
                      WatchClusterInput(cluster="c", opt_in=OptInRule(), poll_interval_s=0.05))
    return out, beats


async def test_a_retried_watch_reports_what_changed_since_its_heartbeat_and_nothing_twice() -> None:
    running = ScanMemory(taken_at=NOW, jobs={i: (JobState.RUNNING, 0) for i in ("1001", "1002", "1003")})
    out, [beat] = await one_scan_resumed_from(running)
    reported = [(a.job_id, a.evidence[0].split(" on ")[0]) for a in out.anomalies]
    assert reported == [("1002", "slurm: job 1002 FAILED exit=1:0")]
    assert out.launched == []  # the running jobs already had their log watchers
    # What it heartbeats is the compact form, not the scan, and it holds the failure
    assert beat.previous is None and beat.memory is not None and beat.memory.jobs["1002"] == (JobState.FAILED, 0)
    again, _ = await one_scan_resumed_from(beat.memory)
    assert again.anomalies == [] and again.launched == []
