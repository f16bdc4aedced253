"""On the lab: exclude before drain, and the breaker's limit per switch (issue #28's lab tests).

A GPU verdict read off one job's log alone requeues the job with the node excluded for that job,
leaves the node in service and marks it suspect in node memory; the same verdict with the node
agent's Xid on that node (an anomaly from the GPU source) drains it. Three drains under one
switch of the configured topology map trip its limit: the third is refused, the incident goes to
an operator's approval, saying the switch is the likelier culprit, and drains once approved.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import LocalRunner
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Mode, OperatorDecision
from goodput.recover.breaker import BreakerPolicy, TopologyGroup
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import Decision, DecisionVerb, IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.trust import AutonomyPolicy
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab, SlurmRecords
from .harness import eventually
from .switch_limit import assert_switch_held_the_third, drain_two_then_wait, node_state, running_job
from .test_chaos_on_slurm import XID

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(240)]

TWO_SIGNALS = Policy(mode=Mode.AUTONOMOUS, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                     verify_poll_interval_s=0.5, verify_running_timeout_s=120, in_job_follow_s=0,
                     exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=True),
                     autonomy=AutonomyPolicy(earned=False))  # the second signal, not the rule's record


def _agent_xid(cluster: str, job_id: str, node: str) -> Anomaly:
    """What the node agent reports from the node's kernel log for the job running there."""
    now = datetime.now(UTC)
    return Anomaly(id=f"agent-{uuid.uuid4().hex[:8]}", source=AnomalySource.GPU, kind=AnomalyKind.GPU_FAULT,
                   cluster=cluster, job_id=job_id, nodes=(node,), evidence=[XID], observed_at=now, detected_at=now)


async def _outcome(client: Client, incident: str) -> IncidentReport:
    return await asyncio.wait_for(client.get_workflow_handle_for(RecoveryWorkflow.run, incident).result(),
                                  timeout=180)


async def test_a_single_log_gpu_verdict_requeues_excluding_the_node_and_marks_it_suspect(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    backend = SlurmCliBackend(LocalRunner())
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    job_id, node = await running_job(backend, lab, tmp_path)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=TWO_SIGNALS):
        incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(node,),
                                                            cluster=cluster, evidence=(XID,)),
                                TWO_SIGNALS, Mode.AUTONOMOUS)
        report = await _outcome(client, incident)
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    again = await backend.get_job(job_id)

    assert report.state is IncidentState.RECOVERED, report.timeline
    assert again.restart_count == 1 and node not in again.nodes and node in again.excluded_nodes
    assert "DRAIN" not in lab.node(node)["State"] and records.drains(node) == []
    assert report.plan is not None and report.plan.suspect_nodes == (node,)
    assert {s.node: s.marked_by for s in standing}[node] == (incident,)


async def test_the_same_verdict_with_the_agents_xid_on_the_node_drains_it(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    backend = SlurmCliBackend(LocalRunner())
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    policy = TWO_SIGNALS.model_copy(update={"coalesce_window_s": 3.0})  # the log and the agent: one burst
    job_id, node = await running_job(backend, lab, tmp_path)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(node,),
                                                            cluster=cluster, evidence=(XID,)),
                                policy, Mode.AUTONOMOUS)
        assert await inject(client, task_queue, _agent_xid(cluster, job_id, node), policy, Mode.AUTONOMOUS) == incident
        report = await _outcome(client, incident)

    assert report.state is IncidentState.RECOVERED, report.timeline
    assert "DRAIN" in lab.node(node)["State"] and records.drains(node) != []
    assert report.plan is not None and report.plan.nodes_to_drain() == (node,) and report.plan.suspect_nodes == ()
    assert "corroborated (job-log, node-agent)" in report.plan.rationale


async def test_three_drains_under_one_switch_trip_the_switch_limit(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    backend = SlurmCliBackend(LocalRunner())
    cluster = f"sw{uuid.uuid4().hex[:6]}"
    # Every lab node under one leaf switch; the requeued jobs are not waited for (the point is the drains).
    policy = Policy(mode=Mode.AUTONOMOUS, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                    verify_poll_interval_s=0.5, verify_running_timeout_s=5, capacity_wait_s=0, in_job_follow_s=0,
                    max_resume_attempts=1, **ACTS_ALONE,
                    breaker=BreakerPolicy(max_drained_nodes=10, max_drains_per_switch=2,
                                          switches=(TopologyGroup(name="leaf1", nodes="node[1-64]"),)))
    jobs = [await running_job(backend, lab, tmp_path) for _ in range(3)]
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        incident, waiting = await drain_two_then_wait(lab, client, task_queue, policy, cluster, jobs)
        assert_switch_held_the_third(lab, records, jobs, waiting, "leaf1")
        last = jobs[2][1]
        # An operator who looked at the switch and still wants the node out approves the drain.
        await TemporalIncidentService(client, task_queue).decide(incident, Decision(
            verb=DecisionVerb.APPROVE, by=OperatorDecision(who="ops", reason="switch checked, node is bad")))
        await eventually(partial(node_state, lab, last), lambda s: "DRAIN" in s, what=f"{last} drained once approved")
