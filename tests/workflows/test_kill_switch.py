"""The kill switch on the real Temporal dev server: one action stops every autonomous action of a
cluster, an approval given before it does not override it, and releasing it restores the modes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from activities.adapters.audit import JsonlAuditLog
from goodput.models import Mode, OperatorDecision
from goodput.recover.audit import AuditAction
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.kill_switch import KillSwitchState, effective_mode, switch
from goodput.recover.lifecycle import IncidentState
from tests.helpers import eventually
from tests.workflows.helpers import anomaly, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService
from workflows.kill_switch import CONTINUE_AS_NEW_AFTER, kill_switch_workflow_id

pytestmark = pytest.mark.temporal
S = IncidentState
ALICE = OperatorDecision(who="alice", reason="bad drains after the switch firmware update")


def test_the_switch_suspends_every_mode_but_monitor() -> None:
    from datetime import UTC, datetime
    engaged = switch(KillSwitchState(), True, ALICE, datetime(2026, 12, 1, tzinfo=UTC))
    for mode in (Mode.AUTONOMOUS, Mode.APPROVE):
        effective, why = effective_mode(mode, engaged)
        assert effective is Mode.MONITOR and "alice" in why and ALICE.reason in why
    assert effective_mode(Mode.AUTONOMOUS, switch(engaged, False, ALICE, engaged.changes[0].at)) == (
        Mode.AUTONOMOUS, "")


async def test_engaged_every_incident_only_recommends_and_release_restores(client: Client, task_queue: str,
                                                                          tmp_path: Path) -> None:
    service = TemporalIncidentService(client, task_queue)
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    async with running_worker(client, task_queue, audit_log=log) as fake:
        first = anomaly()
        cluster = first.cluster
        state = await service.kill_switch(cluster, True, ALICE)
        assert state.engaged and (await service.kill_switch(cluster)).engaged
        report = await result(client, await inject(client, task_queue, first, mode=Mode.AUTONOMOUS))
        assert report.state is S.RECOMMENDED_ONLY and fake.journal() == []
        assert any("kill switch engaged by alice" in e.detail for e in report.timeline)

        await service.kill_switch(cluster, False, OperatorDecision(who="bob", reason="firmware rolled back"))
        report = await result(client, await inject(client, task_queue, anomaly("1002", cluster=cluster),
                                                   mode=Mode.AUTONOMOUS))
        assert report.state is S.RECOVERED
        for _ in range(50):  # the switch writes its records right after each change
            if len([r for r in log.read() if r.action.startswith("kill-switch")]) == 2:
                break
            await asyncio.sleep(0.1)
    flips = [r for r in log.read() if r.action in (AuditAction.KILL_SWITCH_ON, AuditAction.KILL_SWITCH_OFF)]
    assert [(r.action, r.actor) for r in flips] == [(AuditAction.KILL_SWITCH_ON, "operator:alice"),
                                                  (AuditAction.KILL_SWITCH_OFF, "operator:bob")]
    assert flips[0].reason == ALICE.reason and flips[0].cluster == cluster


async def test_an_approval_does_not_override_a_switch_engaged_while_it_waited(client: Client,
                                                                            task_queue: str) -> None:
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue) as fake:
        waiting = anomaly()
        incident = await inject(client, task_queue, waiting, mode=Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        await service.kill_switch(waiting.cluster, True, ALICE)
        await service.decide(incident, Decision(verb=DecisionVerb.APPROVE,
                                                by=OperatorDecision(who="carol", reason="looks right")))
        report = await result(client, incident)
    assert report.state is S.ESCALATED and fake.journal() == []
    assert "approved, but not carried out: kill switch engaged by alice" in report.timeline[-1].detail


async def test_the_switch_continues_as_new_with_its_state_and_every_change_audited(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    service = TemporalIncidentService(client, task_queue)
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    cluster = anomaly().cluster
    flips = CONTINUE_AS_NEW_AFTER + 1  # one past the limit: the last lands on the next run
    async with running_worker(client, task_queue, audit_log=log):
        for i in range(flips):
            await service.kill_switch(cluster, i % 2 == 0, OperatorDecision(who="alice", reason=f"flip {i}"))
        handle = client.get_workflow_handle(kill_switch_workflow_id(cluster))

        async def runs() -> list[str]:
            return [wf.run_id async for wf in client.list_workflows(f"WorkflowId = '{handle.id}'")]

        await eventually(runs, lambda r: len(r) == 2, what="the switch continued as new once")
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        state = await service.kill_switch(cluster)
        assert state.engaged is (flips % 2 == 1)  # the last flip (index flips-1, even) engaged it
        # the new run carried its predecessor's changes on: the ones before the last are the old run's
        assert [c.by.reason for c in state.changes[-3:]] == [f"flip {i}" for i in range(flips - 3, flips)]
        await eventually(lambda: len([r for r in log.read() if r.action.startswith("kill-switch")]),
                         lambda n: n == flips, what="every change in the audit log")
