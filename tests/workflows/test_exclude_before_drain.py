"""Exclude before drain on the real dev server: one job's log excludes, the node's own word drains.

A GPU verdict read off the job's log alone requeues the job with the node excluded for that job,
drains nothing, and marks the node suspect in the cluster's node memory (`goodput nodes`). The
same verdict with the node agent's Xid on that node (an anomaly from the GPU source) drains it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from temporalio.client import Client

from goodput.diagnose.node_memory import NodeMemoryPolicy
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Mode, OperatorDecision
from goodput.recover.breaker import BreakerPolicy, TopologyGroup
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from tests.helpers import eventually
from tests.workflows.helpers import (
    FAST,
    anomaly,
    cluster_with_three_users,
    inject,
    result,
    running_worker,
    wait_for_state,
)
from workers.client import TemporalIncidentService

TWO_SIGNALS = FAST.model_copy(update={"exclude_before_drain": ExcludeBeforeDrainPolicy(enabled=True)})


async def test_a_single_log_gpu_verdict_excludes_the_node_and_marks_it_suspect(client: Client,
                                                                               task_queue: str) -> None:
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(cluster=cluster), TWO_SIGNALS, Mode.AUTONOMOUS)
        report = await result(client, incident)
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert fake.journal("drain") == []
    job = await fake.get_job("1001")
    assert job.excluded_nodes == ("node2",) and "node2" not in job.nodes
    assert report.plan is not None and report.plan.suspect_nodes == ("node2",)
    assert "only the job's log blames it" in report.plan.rationale
    assert {s.node: s.marked_by for s in standing}["node2"] == (incident,)


async def test_the_agents_xid_on_the_node_makes_the_same_verdict_drain(client: Client, task_queue: str) -> None:
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    # The job's log and the agent's report arrive as one burst (one incident).
    policy = TWO_SIGNALS.model_copy(update={"coalesce_window_s": 5.0})
    now = datetime.now(UTC)
    agent = Anomaly(id=f"agent-{uuid.uuid4().hex[:8]}", source=AnomalySource.GPU, kind=AnomalyKind.GPU_FAULT,
                    cluster=cluster, job_id="1001", nodes=("node2",), evidence=["NVRM: Xid (PCI:0000:3b:00): 79"],
                    observed_at=now, detected_at=now)
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(cluster=cluster), policy, Mode.AUTONOMOUS)
        assert await inject(client, task_queue, agent, policy, Mode.AUTONOMOUS) == incident
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert [d.target for d in fake.journal("drain")] == ["node2"]
    assert report.plan is not None and report.plan.suspect_nodes == ()
    assert "corroborated (job-log, node-agent)" in report.plan.rationale


async def test_a_second_jobs_log_on_a_suspect_node_is_the_second_signal(client: Client, task_queue: str) -> None:
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    # Not enough for the memory to hold node1 suspect on its own: only the first job's mark counts.
    policy = TWO_SIGNALS.model_copy(update={"node_memory": NodeMemoryPolicy(min_users=3)})
    reports = []
    async with running_worker(client, task_queue, cluster_with_three_users()) as fake:
        for job_id in ("2001", "2002"):  # alice's and mallory's jobs share node1 only
            incident = await inject(client, task_queue, anomaly(job_id, nodes=("node1",), cluster=cluster),
                                    policy, Mode.AUTONOMOUS)
            reports.append(await result(client, incident))
    first, second = reports
    assert first.plan is not None and first.plan.suspect_nodes == ("node1",)
    assert second.plan is not None and second.plan.nodes_to_drain() == ("node1",)
    assert "corroborated (job-log, node-memory)" in second.plan.rationale
    assert [d.target for d in fake.journal("drain")] == ["node1"]


async def test_the_sites_health_probe_run_on_request_settles_it(client: Client, task_queue: str) -> None:
    # The site's probe fails on node2 only (`{node}` is the node's name), as `dcgmi diag` would on a bad GPU.
    probe = ExcludeBeforeDrainPolicy(enabled=True, probe_command=("sh", "-c", "test {node} != node2"))
    policy = FAST.model_copy(update={"exclude_before_drain": probe})
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    reports = []
    async with running_worker(client, task_queue) as fake:
        for job_id, node in (("1001", "node2"), ("1002", "node3")):
            incident = await inject(client, task_queue, anomaly(job_id, nodes=(node,), cluster=cluster), policy,
                                    Mode.AUTONOMOUS)
            reports.append(await result(client, incident))
    bad, good = reports
    assert bad.plan is not None and bad.plan.nodes_to_drain() == ("node2",)
    assert "corroborated (job-log, health-probe)" in bad.plan.rationale
    assert good.plan is not None and good.plan.suspect_nodes == ("node3",)
    assert any("health probe of node3 passed" in e.detail for e in good.timeline)
    assert [d.target for d in fake.journal("drain")] == ["node2"]


async def test_in_approve_mode_a_drain_past_the_switch_limit_is_asked_for_again(client: Client,
                                                                                 task_queue: str) -> None:
    policy = FAST.model_copy(update={"breaker": BreakerPolicy(max_drains_per_switch=1, switches=(
        TopologyGroup(name="leaf1", nodes="node[1-8]"),))})
    cluster = f"sw{uuid.uuid4().hex[:6]}"
    service = TemporalIncidentService(client, task_queue)
    approve = Decision(verb=DecisionVerb.APPROVE, by=OperatorDecision(who="ops", reason="looks right"))
    async with running_worker(client, task_queue) as fake:
        first = await inject(client, task_queue, anomaly("1001", nodes=("node2",), cluster=cluster), policy,
                             Mode.APPROVE)
        await wait_for_state(client, first, IncidentState.AWAITING_APPROVAL)
        await service.decide(first, approve)
        assert (await result(client, first)).state is IncidentState.RECOVERED
        second = await inject(client, task_queue, anomaly("1002", nodes=("node3",), cluster=cluster), policy,
                              Mode.APPROVE)
        await wait_for_state(client, second, IncidentState.AWAITING_APPROVAL)
        await service.decide(second, approve)  # approves the plan; the switch limit then asks again
        # The limit's words appear first in the ISOLATING entry, then in the AWAITING_APPROVAL one.
        asked = await eventually(lambda: service.get(second), lambda r: r.state is IncidentState.AWAITING_APPROVAL
                                 and "switch leaf1 drain limit tripped" in r.timeline[-1].detail,
                                 what="the switch limit's question")
        assert asked.state is IncidentState.AWAITING_APPROVAL and fake.journal("drain")[-1].target == "node2"
        await service.decide(second, approve)
        assert (await result(client, second)).state is IncidentState.RECOVERED
    assert [d.target for d in fake.journal("drain")] == ["node2", "node3"]


async def test_an_operators_injected_anomaly_drains_as_the_operators_word(client: Client, task_queue: str) -> None:
    # `goodput inject` names node2: an operator's word (docs/security.md), not one job-log line.
    cluster = f"ebd{uuid.uuid4().hex[:6]}"
    said = anomaly(cluster=cluster).model_copy(update={"source": AnomalySource.OPERATOR})
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, said, TWO_SIGNALS, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert [d.target for d in fake.journal("drain")] == ["node2"]
    assert report.plan is not None and report.plan.suspect_nodes == ()
    assert "drain node2: corroborated (operator)" in report.plan.rationale
