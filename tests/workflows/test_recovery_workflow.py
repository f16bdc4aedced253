"""RecoveryWorkflow on the real Temporal dev server, against the fake scheduler."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.adapters.audit import MemoryAuditLog
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.models import AnomalyKind, Category, Mode, OperatorDecision, Outcome
from goodput.ownership import owning_incident
from goodput.recover.audit import AuditAction
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobInfo, JobState, NodeInfo
from goodput.service.incidents import DecisionRejectedError
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows import search
from workflows.breaker import DrainBreakerWorkflow, breaker_workflow_id
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal
OPT_IN = "goodput:opt-in"
S = IncidentState


async def test_monitor_mode_recommends_and_touches_nothing(client: Client, task_queue: str) -> None:
    notifier = RecordingNotifier()
    async with running_worker(client, task_queue, notifier=notifier) as fake:
        incident = await inject(client, task_queue, anomaly(), mode=Mode.MONITOR)
        report = await result(client, incident)
    assert report.state is S.RECOMMENDED_ONLY
    assert report.outcome is Outcome.RECOMMENDED_ONLY
    assert report.plan is not None and report.plan.nodes_to_drain() == ("node2",)
    assert fake.journal() == []
    assert any("recommendation" in n.summary for n in notifier.sent)


async def test_autonomous_drains_requeues_and_verifies(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(), mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    drains = fake.journal("drain")
    assert [d.target for d in drains] == ["node2"]
    assert owning_incident(drains[0].detail) == incident
    assert [r.target for r in fake.journal("requeue")] == ["1001"]
    job = await fake.get_job("1001")
    assert job.state is JobState.RUNNING and "node2" not in job.nodes
    states = [e.state for e in report.timeline]
    assert states.index(S.ISOLATING) < states.index(S.RESUMING) < states.index(S.VERIFYING)


async def test_resubmit_excludes_drained_node(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"resume": ResumeStrategy.RESUBMIT})
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert report.resumed_job_id and report.resumed_job_id != "1001"
    new_job = await fake.get_job(report.resumed_job_id)
    assert new_job.excluded_nodes == ("node2",)
    assert "goodput:resubmit-of=1001" in new_job.comment
    assert (await fake.get_job("1001")).state is JobState.CANCELLED  # never two copies of one run


async def test_application_error_blames_no_hardware(client: Client, task_queue: str) -> None:
    a = anomaly(kind=AnomalyKind.CRASH, category=Category.APP_ERROR, nodes=("node1",),
                evidence=("ValueError: bad batch",))
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, a, mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.STOPPED
    assert fake.journal("drain") == [] and fake.journal("requeue") == []
    assert report.attribution is not None and report.attribution.drain is False
    assert "application" in report.attribution.explanation


async def test_blast_radius_escalates_instead_of_mass_drain(client: Client, task_queue: str) -> None:
    a = anomaly(kind=AnomalyKind.NODE_FAILURE, nodes=("node1", "node2", "node3"))
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, a, mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.ESCALATED
    assert report.plan is not None and report.plan.blocked_by_blast_radius
    assert fake.journal() == []


async def test_unknown_job_escalates_with_clear_reason(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly("777"), mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.ESCALATED
    assert "777" in report.timeline[-1].detail
    assert fake.journal() == []


async def test_approve_mode_waits_then_recovers(client: Client, task_queue: str) -> None:
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(), mode=Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        assert fake.journal() == []
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
        assert await handle.query(RecoveryWorkflow.state) is S.AWAITING_APPROVAL
        planned = await handle.query(RecoveryWorkflow.plan)
        assert planned is not None and planned.nodes_to_drain() == ("node2",)
        state = await service.decide(incident, Decision(
            verb=DecisionVerb.APPROVE, by=OperatorDecision(who="alice", reason="xid 79 confirmed")))
        assert state is not S.AWAITING_APPROVAL
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert report.decision is not None and report.decision.who == "alice"
    assert any("alice" in e.detail and "xid 79 confirmed" in e.detail for e in report.timeline)
    with pytest.raises(DecisionRejectedError, match="already recovered"):
        await service.decide(incident, Decision(
            verb=DecisionVerb.CANCEL, by=OperatorDecision(who="bob", reason="too late")))


async def test_cancel_signal_from_the_ui_ends_the_incident(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(), mode=Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        handle = client.get_workflow_handle(incident)
        await handle.signal("cancel", OperatorDecision(who="carol", reason="maintenance window"))
        report = await result(client, incident)
    assert report.state is S.CANCELLED
    assert "carol" in report.timeline[-1].detail
    assert fake.journal() == []


async def test_cancel_interrupts_a_step_in_flight(client: Client, task_queue: str) -> None:
    # Three nodes: once node2 is drained the requeued two-node job cannot run, so verification
    # waits (up to ten minutes by policy) and only the operator's cancel can end it quickly.
    cluster = FakeClusterState(
        nodes={n: NodeInfo(name=n, state="ALLOCATED") for n in ("node1", "node2", "node3")},
        jobs={"1001": JobInfo(job_id="1001", state=JobState.RUNNING, nodes=("node1", "node2"), comment=OPT_IN),
              "1002": JobInfo(job_id="1002", state=JobState.RUNNING, nodes=("node3",), comment=OPT_IN)})
    policy = FAST.model_copy(update={"verify_running_timeout_s": 600.0})
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue, FakeScheduler(cluster)) as fake:
        incident = await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS)
        await wait_for_state(client, incident, S.VERIFYING)
        state = await service.decide(incident, Decision(
            verb=DecisionVerb.CANCEL, by=OperatorDecision(who="dave", reason="stop")))
        report = await result(client, incident)
    assert state is S.CANCELLED
    assert report.state is S.CANCELLED
    assert (await fake.get_job("1001")).state is JobState.PENDING


async def test_burst_of_fifty_anomalies_is_one_incident(client: Client, task_queue: str) -> None:
    first = anomaly()
    burst = [first] + [anomaly(first.job_id, cluster=first.cluster) for _ in range(49)]
    policy = FAST.model_copy(update={"coalesce_window_s": 1.5})
    async with running_worker(client, task_queue):
        ids = await asyncio.gather(*(inject(client, task_queue, a, policy, Mode.MONITOR) for a in burst))
        assert len(set(ids)) == 1
        report = await result(client, ids[0])
    assert report.anomaly_count == 50
    assert len({a.id for a in report.anomalies}) == 50


async def test_search_attributes_make_incidents_filterable(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue):
        incident = await inject(client, task_queue, anomaly(), mode=Mode.MONITOR)
        await result(client, incident)
    described = await client.get_workflow_handle(incident).describe()
    attrs = described.typed_search_attributes
    assert attrs.get(search.STATE) == "recommended-only"
    assert attrs.get(search.CATEGORY) == "gpu-hardware"
    assert list(attrs.get(search.CULPRIT_NODES) or []) == ["node2"]
    assert attrs.get(search.OUTCOME) == "recommended-only"


async def test_drain_breaker_stops_a_drain_storm(client: Client, task_queue: str) -> None:
    # A switch failure: several jobs fail at once, each blaming its own node.
    policy = FAST.model_copy(update={"breaker": BreakerPolicy(max_drained_nodes=2)})
    first = anomaly("1001", nodes=("node1",))
    cluster = first.cluster
    storm = [first, anomaly("1002", nodes=("node3",), cluster=cluster),
             anomaly("1003", nodes=("node5",), cluster=cluster)]
    log = MemoryAuditLog()
    async with running_worker(client, task_queue, audit_log=log) as fake:
        reports = []
        for a in storm:  # one after another so which one trips the breaker is deterministic
            reports.append(await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS)))
        breaker = client.get_workflow_handle(breaker_workflow_id(cluster))
        status = await breaker.query(DrainBreakerWorkflow.status)
        await TemporalIncidentService(client, task_queue).breaker_reset(
            cluster, OperatorDecision(who="erin", reason="switch replaced"))
        for _ in range(50):  # the breaker writes its trip and reset to the audit log as they happen
            flips = [r for r in log.read() if r.action in (AuditAction.BREAKER_TRIP, AuditAction.BREAKER_RESET)]
            if len(flips) == 2:
                break
            await asyncio.sleep(0.1)
    assert [r.state for r in reports] == [S.RECOVERED, S.RECOVERED, S.ESCALATED]
    assert "breaker" in reports[2].timeline[-1].detail
    assert sorted(d.target for d in fake.journal("drain")) == ["node1", "node3"]
    assert status.trips == 1 and status.tripped_at is not None
    assert [(r.action, r.actor) for r in flips] == [(AuditAction.BREAKER_TRIP, "goodput"),
                                                  (AuditAction.BREAKER_RESET, "operator:erin")]
    assert flips[0].nodes == ("node5",) and flips[1].reason == "switch replaced"


async def test_late_evidence_is_folded_in_while_lingering_then_turned_away(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"linger_s": 2.0})
    first = anomaly()
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue):
        opened = await service.inject(first, policy, Mode.MONITOR)
        await wait_for_state(client, opened.incident_id, S.RECOMMENDED_ONLY)
        late = await service.inject(anomaly(first.job_id, cluster=first.cluster), policy, Mode.MONITOR)
        report = await result(client, opened.incident_id)
        after = await service.inject(anomaly(first.job_id, cluster=first.cluster), policy, Mode.MONITOR)
    assert opened.new_incident and not late.new_incident and late.incident_id == opened.incident_id
    assert report.anomaly_count == 2
    assert not after.new_incident and "already closed" in after.note


class BrokenNotifier:
    async def notify(self, notification: object) -> None:
        raise ApplicationError("chat webhook is down", non_retryable=True)


async def test_a_broken_notifier_never_changes_the_outcome(client: Client, task_queue: str) -> None:
    fake = FakeScheduler()
    worker = build_worker(client, task_queue, fake, BrokenNotifier(), fail_workflows_on_bugs=True)
    async with worker:
        incident = await inject(client, task_queue, anomaly(), mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert any("notification failed" in e.detail and "webhook is down" in e.detail for e in report.timeline)


async def test_a_resumed_job_waiting_for_capacity_is_waited_for_not_failed(client: Client, task_queue: str) -> None:
    # Three nodes: with node2 drained, the requeued two-node job must wait until job 1002 ends.
    cluster = FakeClusterState(
        nodes={n: NodeInfo(name=n, state="ALLOCATED") for n in ("node1", "node2", "node3")},
        jobs={"1001": JobInfo(job_id="1001", state=JobState.RUNNING, nodes=("node1", "node2"), comment=OPT_IN),
              "1002": JobInfo(job_id="1002", state=JobState.RUNNING, nodes=("node3",), comment=OPT_IN)})
    policy = FAST.model_copy(update={"verify_running_timeout_s": 1.0, "capacity_wait_s": 120.0})
    async with running_worker(client, task_queue, FakeScheduler(cluster)) as fake:
        incident = await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS)
        await wait_for_state(client, incident, S.VERIFYING)
        pending = await fake.get_job("1001")
        assert pending.state is JobState.PENDING and pending.state_reason == "Resources"
        await asyncio.sleep(2.0)  # well past the 1 s running deadline: capacity waits do not count
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
        assert await handle.query(RecoveryWorkflow.state) is S.VERIFYING
        fake.set_job_state("1002", JobState.COMPLETED)
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert (await fake.get_job("1001")).nodes == ("node1", "node3")
