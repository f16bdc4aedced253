"""The audit trail on the real Temporal dev server: every action and decision, once, with its result.

Each record is in the incident's report (so a workflow history rebuilds it) and in the audit log
the worker's activity appends to; both must agree, a retried write must not duplicate, and an
operator's decision names the operator and their reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.audit import JsonlAuditLog
from goodput.models import Mode, OperatorDecision
from goodput.recover.audit import GOODPUT_ACTOR, AuditAction
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import anomaly, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService

pytestmark = pytest.mark.temporal
S = IncidentState


async def test_an_autonomous_recovery_audits_its_drain_and_requeue(client: Client, task_queue: str,
                                                                  tmp_path: Path) -> None:
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    async with running_worker(client, task_queue, audit_log=log):
        incident = await inject(client, task_queue, anomaly(), mode=Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    drain, requeue = report.audit
    assert (drain.action, drain.actor, drain.nodes, drain.job_id) == (AuditAction.DRAIN, GOODPUT_ACTOR, ("node2",),
                                                                      "1001")
    assert drain.result == "drained node2" and drain.mode == "autonomous" and drain.incident_id == incident
    assert requeue.action is AuditAction.REQUEUE and "requeued" in requeue.result.lower()
    assert drain.at <= requeue.at
    assert log.read() == list(report.audit)  # the log and the history agree, each record once


async def test_an_operator_approval_is_audited_with_who_and_why(client: Client, task_queue: str,
                                                               tmp_path: Path) -> None:
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue, audit_log=log):
        incident = await inject(client, task_queue, anomaly(), mode=Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        await service.decide(incident, Decision(verb=DecisionVerb.APPROVE,
                                                by=OperatorDecision(who="alice", reason="xid 79 confirmed")))
        report = await result(client, incident)
    approve, drain, requeue = report.audit
    assert (approve.action, approve.actor, approve.reason) == (AuditAction.APPROVE, "operator:alice",
                                                               "xid 79 confirmed")
    assert approve.result == "taken while awaiting-approval"
    assert [drain.action, requeue.action] == [AuditAction.DRAIN, AuditAction.REQUEUE]
    assert [r.id for r in log.read()] == [r.id for r in report.audit]


async def test_monitor_mode_audits_nothing(client: Client, task_queue: str, tmp_path: Path) -> None:
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    async with running_worker(client, task_queue, audit_log=log):
        report = await result(client, await inject(client, task_queue, anomaly(), mode=Mode.MONITOR))
    assert report.audit == () and log.read() == []
