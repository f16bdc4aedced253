"""The track record on the real Temporal dev server: recoveries feed their rule's record, a rule
cancelled as wrong in 3 of its last 5 recommendations falls back to approval in an autonomous
partition, an operator's pin overrides that, and every change of autonomy is audited."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.adapters.audit import JsonlAuditLog
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Anomaly, AnomalyKind, Category, Mode, OperatorDecision
from goodput.recover.audit import AuditAction
from goodput.recover.incident import Decision, DecisionVerb, IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import Phase, ReturnToServicePolicy
from goodput.recover.trust import AutonomyPolicy, RuleSummary
from goodput.scheduler import JobInfo, JobState
from tests.helpers import eventually
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id
from workflows.trust import TrustRecordWorkflow, trust_workflow_id

pytestmark = pytest.mark.temporal
S = IncidentState
RULE = "category:hang"
# Two agreements earn autonomy here; agreement itself never holds it back, so only the
# 3-of-5 rule can take it away.
POLICY = FAST.model_copy(update={"autonomy": AutonomyPolicy(earned=True, min_decisions=2, min_agreement=0.0),
                                 "approval_timeout_s": 120.0})


def hang(fake: FakeScheduler, n: int, cluster: str) -> Anomaly:
    job_id = str(3000 + n)
    fake.add_job(JobInfo(job_id=job_id, name=f"train-{n}", state=JobState.RUNNING, partition="gpu",
                         nodes=(f"node{n % 8 + 1}",), requeue=True, comment="goodput:opt-in", user="alice",
                         user_id=5000, command="train.sbatch"))
    a = anomaly(job_id, kind=AnomalyKind.HANG, nodes=(), category=Category.HANG, cluster=cluster)
    return a.model_copy(update={"confidence": "high"})


async def decided(client: Client, task_queue: str, a: Anomaly, verb: DecisionVerb, reason: str) -> IncidentReport:
    service = TemporalIncidentService(client, task_queue)
    incident = await inject(client, task_queue, a, POLICY, mode=Mode.APPROVE)
    await wait_for_state(client, incident, S.AWAITING_APPROVAL)
    await service.decide(incident, Decision(verb=verb, by=OperatorDecision(who="carol", reason=reason)))
    return await result(client, incident)


async def test_wrong_three_of_five_falls_back_to_approval_and_a_pin_overrides_it(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    service = TemporalIncidentService(client, task_queue)
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    fake = FakeScheduler()
    async with running_worker(client, task_queue, scheduler=fake, audit_log=log):
        cluster = anomaly().cluster
        for n in (1, 2):  # approved twice: earned
            assert (await decided(client, task_queue, hang(fake, n, cluster), DecisionVerb.APPROVE, "right")).state \
                is S.RECOVERED
        alone = await result(client, await inject(client, task_queue, hang(fake, 3, cluster), POLICY,
                                                  mode=Mode.AUTONOMOUS))
        assert alone.state is S.RECOVERED and alone.decision is None

        for n in (4, 5, 6):  # three of the last five cancelled as wrong
            report = await decided(client, task_queue, hang(fake, n, cluster), DecisionVerb.CANCEL,
                                   "wrong-diagnosis: the job was waiting on its data loader")
            assert report.state is S.CANCELLED

        incident = await inject(client, task_queue, hang(fake, 7, cluster), POLICY, mode=Mode.AUTONOMOUS)
        waiting = await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        assert waiting.mode is Mode.APPROVE
        assert any("cancelled as wrong in 3 of its last 5 recommendations" in e.detail for e in waiting.timeline)
        await service.decide(incident, Decision(verb=DecisionVerb.CANCEL,
                                                by=OperatorDecision(who="carol", reason="not-needed: done")))
        await result(client, incident)

        pinned = await service.trust_pin(cluster, RULE, Mode.AUTONOMOUS,
                                         OperatorDecision(who="dave", reason="fixed the loader"), POLICY.autonomy)
        assert pinned.level is Mode.AUTONOMOUS and pinned.pinned
        again = await result(client, await inject(client, task_queue, hang(fake, 8, cluster), POLICY,
                                                  mode=Mode.AUTONOMOUS))
        assert again.state is S.RECOVERED and again.decision is None

        [line] = await service.trust(cluster)
        audit = await eventually(
            lambda: [r for r in log.read() if r.action.startswith("autonomy-")],
            lambda records: len(records) == 3, what="three autonomy changes in the audit log")
    # The record's own history replays on today's code (its pins, notes and audit writes).
    history = await client.get_workflow_handle(trust_workflow_id(cluster)).fetch_history()
    replayer = Replayer(workflows=[TrustRecordWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None
    assert line == RuleSummary(rule=RULE, recommendations=8, agreed=2, disagreed=4, wrong=3, false_drains=0,
                               job_not_node=0, verified=4, autonomy=Mode.AUTONOMOUS, pinned=True,
                               why="pinned to autonomous by dave: fixed the loader")
    assert [(r.action, r.actor) for r in audit] == [
        (AuditAction.AUTONOMY_EARNED, "goodput"), (AuditAction.AUTONOMY_LOST, "goodput"),
        (AuditAction.AUTONOMY_PINNED, "operator:dave")]
    assert all(r.cluster == cluster for r in audit)
    assert "cancelled as wrong in 3 of its last 5" in audit[1].result


async def test_without_a_record_an_autonomous_partition_asks_first(client: Client, task_queue: str) -> None:
    fake = FakeScheduler()
    async with running_worker(client, task_queue, scheduler=fake) as fake:
        incident = await inject(client, task_queue, hang(fake, 1, anomaly().cluster), POLICY, mode=Mode.AUTONOMOUS)
        report = await wait_for_state(client, incident, S.AWAITING_APPROVAL)
    assert any("0 operator decisions, 2 needed" in e.detail for e in report.timeline) and fake.journal() == []


async def test_a_drained_node_back_with_no_fault_found_is_a_false_drain_of_its_rule(
        client: Client, task_queue: str) -> None:
    quick = ReturnToServicePolicy(enabled=True, quarantine_s=0.3, retry_after_s=0.2, max_check_failures=2,
                                  check_command=(sys.executable, "-c", "pass"), offence_window_s=0.5)
    policy = POLICY.model_copy(update={"return_to_service": quick})
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue) as fake:
        a = anomaly()  # a GPU fault on node2, drained
        incident = await inject(client, task_queue, a, policy, Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        await service.decide(incident, Decision(verb=DecisionVerb.APPROVE,
                                                by=OperatorDecision(who="carol", reason="drain it")))
        report = await result(client, incident)
        assert [d.target for d in fake.journal("drain")] == ["node2"]
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(a.cluster, "node2"))
        assert (await asyncio.wait_for(handle.result(), 30)).phase is Phase.RETURNED
        [line] = await eventually(lambda: service.trust(a.cluster), lambda lines: lines and lines[0].false_drains,
                                  what="the false drain in the record")
    replayer = Replayer(workflows=[NodeHealthWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(await handle.fetch_history(),
                                           raise_on_replay_failure=False)).replay_failure is None
    assert report.attribution is not None and line.rule == report.attribution.rule
    assert (line.agreed, line.false_drains, line.autonomy) == (1, 1, Mode.APPROVE)
    assert "no fault found" in line.why
