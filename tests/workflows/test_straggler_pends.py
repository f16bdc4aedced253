"""A straggler named while its job runs, on the real dev server: in autonomous mode the job is not
requeued; the node's exclusion pends (marked suspect in node memory), and the job's later failure
requeues it with the node in its ExcNodeList, whether it folds into the same incident (same job
attempt) or opens a new one (the exclusion read back from node memory). A job that only ran out
of time is not restarted for it; monitor mode only recommends; approve mode pends once approved;
`next-checkpoint` requeues off the node once the job saved a newer checkpoint."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from goodput.checkpoints import CheckpointConfig, to_comment
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode, OperatorDecision
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.straggler_plan import StragglerPolicy, StragglerRestart
from goodput.scheduler import JobState
from tests.fakes.checkpoint_bytes import dcp_metadata
from tests.workflows.helpers import FAST, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService

S = IncidentState
POLICY = FAST.model_copy(update={"exclude_before_drain": ExcludeBeforeDrainPolicy(enabled=True)})
NOTE = "node2 will be excluded at the job's next restart: it costs 720 s of step time per hour"


def seen(cluster: str, kind: AnomalyKind, source: AnomalySource, nodes: tuple[str, ...], *, attempt: int = 0,
         lost: float | None = None) -> Anomaly:
    now = datetime.now(UTC)
    return Anomaly(id=f"{kind}-{uuid.uuid4().hex[:8]}", source=source, kind=kind, cluster=cluster, job_id="1001",
                   job_attempt=attempt, nodes=nodes, evidence=[f"{kind} on {', '.join(nodes) or 'the job'}"],
                   category=Category.STRAGGLER if kind is AnomalyKind.STRAGGLER else None, observed_at=now,
                   detected_at=now, lost_s_per_h=lost)


def slow_node2(cluster: str) -> Anomaly:
    return seen(cluster, AnomalyKind.STRAGGLER, AnomalySource.LOG, ("node2",), lost=720.0)


def xid_on_node1(cluster: str, attempt: int = 0) -> Anomaly:
    return seen(cluster, AnomalyKind.GPU_FAULT, AnomalySource.GPU, ("node1",), attempt=attempt)


async def test_a_straggler_pends_its_exclusion_and_the_jobs_later_crash_requeues_off_it(
        client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, slow_node2(cluster), POLICY, Mode.AUTONOMOUS)
        pending = await wait_for_state(client, incident, S.PENDING_EXCLUSION)
        assert fake.journal("requeue") == [] and fake.journal("cancel") == [] and fake.journal("drain") == []
        assert (await fake.get_job("1001")).state is JobState.RUNNING
        assert pending.plan is not None and pending.plan.pending_exclusion == ("node2",)
        assert any(e.detail == NOTE for e in pending.timeline), pending.timeline
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
        assert {s.node: s.marked_by for s in standing}["node2"] == (incident,)
        # The job then fails on another node (the agent's Xid on node1): the same job attempt.
        fake.set_job_state("1001", JobState.FAILED)
        assert await inject(client, task_queue, xid_on_node1(cluster), POLICY, Mode.AUTONOMOUS) == incident
        report = await result(client, incident)
    assert report.state is S.RECOVERED, report.timeline
    job = await fake.get_job("1001")
    assert set(job.excluded_nodes) == {"node1", "node2"} and not {"node1", "node2"} & set(job.nodes)
    assert [d.target for d in fake.journal("drain")] == ["node1"]  # node2 is a suspect, not drained
    assert report.plan is not None and "excluding node2, pending from this job's straggler verdict" in \
        report.plan.rationale


async def test_the_next_attempts_incident_reads_the_pending_exclusion_from_node_memory(
        client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    # The straggler incident stops following the job at once: only node memory keeps the exclusion.
    policy = POLICY.model_copy(update={"straggler": StragglerPolicy(follow_s=0)})
    async with running_worker(client, task_queue) as fake:
        first = await inject(client, task_queue, slow_node2(cluster), policy, Mode.AUTONOMOUS)
        closed = await result(client, first)
        assert closed.state is S.RECOMMENDED_ONLY and fake.journal("requeue") == [], closed.timeline
        fake.set_job_state("1001", JobState.FAILED, restart_count=1)  # Slurm's own requeue, then a failure
        second = await inject(client, task_queue, xid_on_node1(cluster, attempt=1), policy, Mode.AUTONOMOUS)
        assert second != first
        report = await result(client, second)
    assert report.state is S.RECOVERED, report.timeline
    assert set((await fake.get_job("1001")).excluded_nodes) == {"node1", "node2"}


async def test_a_job_the_scheduler_ended_by_its_time_limit_is_not_restarted_for_a_straggler(
        client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, slow_node2(cluster), POLICY, Mode.AUTONOMOUS)
        await wait_for_state(client, incident, S.PENDING_EXCLUSION)
        fake.set_job_state("1001", JobState.TIMEOUT)
        timeout = seen(cluster, AnomalyKind.JOB_FAILED, AnomalySource.SCHEDULER, ()).model_copy(
            update={"category": Category.SCHEDULER_POLICY, "evidence": ["slurm: job 1001 TIMEOUT"]})
        assert await inject(client, task_queue, timeout, POLICY, Mode.AUTONOMOUS) == incident
        report = await result(client, incident)
    assert report.state is S.STOPPED and fake.journal("requeue") == [], report.timeline
    assert report.plan is not None and "the job ended TIMEOUT" in report.plan.rationale


async def test_monitor_mode_only_recommends_the_exclusion(client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, slow_node2(cluster), POLICY, Mode.MONITOR)
        report = await result(client, incident)
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    assert report.state is S.RECOMMENDED_ONLY and fake.journal("requeue") == []
    assert report.plan is not None and "exclude node2 at the job's next restart" in report.plan.rationale
    assert all(e.detail != NOTE for e in report.timeline)
    assert all(s.marked_by == () for s in standing)


async def test_in_approve_mode_the_exclusion_pends_once_approved(client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, slow_node2(cluster), POLICY, Mode.APPROVE)
        waiting = await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        assert all(e.detail != NOTE for e in waiting.timeline)
        await service.decide(incident, Decision(verb=DecisionVerb.APPROVE,
                                                by=OperatorDecision(who="ops", reason="keep it off node2")))
        pending = await wait_for_state(client, incident, S.PENDING_EXCLUSION)
        await service.decide(incident, Decision(verb=DecisionVerb.CANCEL,
                                                by=OperatorDecision(who="ops", reason="done here")))
        closed = await result(client, incident)
    assert any(e.detail == NOTE for e in pending.timeline) and fake.journal("requeue") == []
    assert closed.state is S.CANCELLED


def _dcp_step(root: Path, step: int) -> None:
    """One whole PyTorch DCP checkpoint of `step` under `root`."""
    directory = root / f"step-{step}"
    directory.mkdir(parents=True)
    (directory / ".metadata").write_bytes(dcp_metadata({"__0_0.distcp": 64}))
    (directory / "__0_0.distcp").write_bytes(b"y" * 64)


async def test_next_checkpoint_requeues_off_the_node_once_the_job_saved_a_newer_one(
        client: Client, task_queue: str) -> None:
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    policy = POLICY.model_copy(update={"verify_progress_timeout_s": 30.0, "straggler": StragglerPolicy(
        restart=StragglerRestart.NEXT_CHECKPOINT, checkpoint_poll_s=0.3)})
    base = Path(tempfile.mkdtemp(prefix="goodput-ckpt-", dir="/tmp"))
    base.chmod(0o755)
    fake = FakeScheduler()
    job = fake.snapshot().jobs["1001"]
    root, log = base / "ckpt", base / "out.log"
    _dcp_step(root, 100)
    log.write_text("iteration 240/ 1000 | elapsed time per iteration (ms): 100.0\n")
    comment = f"goodput:opt-in {to_comment(CheckpointConfig(layout='dcp', root=str(root), settle_s=0))}"
    # No owner uid: the worker reads the tree in-process (test_checkpoint_resume.py covers reading
    # it as the owner), so this test does not depend on that user reaching the virtualenv.
    fake.add_job(job.model_copy(update={"comment": comment, "stdout_path": str(log), "user_id": None,
                                        "group_id": None}))
    try:
        async with running_worker(client, task_queue, fake):
            incident = await inject(client, task_queue, slow_node2(cluster), policy, Mode.AUTONOMOUS)
            await wait_for_state(client, incident, S.PENDING_EXCLUSION)
            await asyncio.sleep(1.0)  # a few looks at the checkpoints: step 100 was there before, not newer
            assert fake.journal("requeue") == []
            _dcp_step(root, 300)  # the job saves its next checkpoint
            await wait_for_state(client, incident, S.VERIFYING)
            with log.open("a") as out:  # the requeued job resumes from step 300 and moves on
                out.write("iteration 301/ 1000 | elapsed time per iteration (ms): 100.0\n")
            report = await result(client, incident)
    finally:
        shutil.rmtree(base)
    assert report.state is S.RECOVERED, report.timeline
    assert len(fake.journal("requeue")) == 1 and report.checkpoint is not None and report.checkpoint.step == 300
    assert "node2" in (await fake.get_job("1001")).excluded_nodes
    assert any("saved checkpoint step 300" in e.detail for e in report.timeline)
