"""Return to service on the real Temporal dev server: a node goodput drained comes back after its
quarantine and a passed health check; a node that keeps failing, or someone else's drain, does not."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.audit import JsonlAuditLog
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode, OperatorDecision
from goodput.ownership import drain_reason
from goodput.recover.audit import AuditAction
from goodput.recover.node_health import (
    CheckResult,
    NodeHealthState,
    Phase,
    ReturnToServicePolicy,
    check_argv,
    checked,
    drained,
    return_refusal,
)
from goodput.service.incidents import DecisionRejectedError, UnknownIncidentError
from tests.helpers import eventually
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workers.client import TemporalIncidentService
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id

pytestmark = pytest.mark.temporal
T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
QUICK = ReturnToServicePolicy(enabled=True, quarantine_s=0.3, retry_after_s=0.2, max_check_failures=2)


def test_the_rules() -> None:
    state = drained(NodeHealthState(cluster="c", node="n1"), "inc-1", T0, QUICK)
    assert state.phase is Phase.QUARANTINED and state.drains == (T0,)
    failed = checked(state, CheckResult(passed=False, detail="exit 1: row remap pending"), QUICK)
    assert failed.phase is Phase.QUARANTINED and failed.failures == 1
    assert checked(failed, CheckResult(passed=False), QUICK).phase is Phase.ESCALATED
    assert checked(failed, CheckResult(passed=True), QUICK).phase is Phase.CHECKING
    again = drained(drained(state, "inc-2", T0 + timedelta(days=1), QUICK), "inc-3", T0 + timedelta(days=2), QUICK)
    assert again.phase is Phase.ESCALATED and "drained 3 times" in again.why
    later = drained(state, "inc-9", T0 + timedelta(days=30), QUICK)
    assert later.phase is Phase.QUARANTINED and later.drains == (T0 + timedelta(days=30),)
    assert check_argv(("ssh", "{node}", "dcgmi", "diag"), "gpu-7") == ("ssh", "gpu-7", "dcgmi", "diag")
    with pytest.raises(ValueError):
        check_argv(("ssh", "{node}"), "gpu-7; reboot")


async def health(client: Client, cluster: str, node: str) -> NodeHealthState:
    handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(cluster, node))
    return await handle.result()


async def test_a_drained_node_returns_after_a_passed_check(client: Client, task_queue: str, tmp_path: Path) -> None:
    marker = tmp_path / "checked"
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "check_command": (sys.executable, "-c", f"open({str(marker)!r}, 'w').write('{{node}}')"),
        "offence_window_s": 0.5})})
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    async with running_worker(client, task_queue, audit_log=log) as fake:
        a = anomaly()
        report = await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        assert [d.target for d in fake.journal("drain")] == ["node2"]
        final = await asyncio.wait_for(health(client, a.cluster, "node2"), 30)
        assert final.phase is Phase.RETURNED
        assert not (await fake.get_node("node2")).drained
    assert marker.read_text() == "node2"  # the check ran against the drained node
    undrain = [r for r in log.read() if r.action is AuditAction.UNDRAIN]
    assert len(undrain) == 1 and undrain[0].nodes == ("node2",) and undrain[0].incident_id == report.incident_id


async def test_a_node_failing_its_check_stays_drained_and_is_escalated(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "check_command": (sys.executable, "-c", "import sys; print('ECC row remap pending'); sys.exit(3)")})})
    async with running_worker(client, task_queue) as fake:
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        final = await asyncio.wait_for(health(client, a.cluster, "node2"), 30)
        assert final.phase is Phase.ESCALATED and final.failures == 2
        assert "exit 3: ECC row remap pending" in final.last_check
        assert (await fake.get_node("node2")).drained
        # What `goodput nodes` shows: each node goodput drained, and where its return stands.
        [shown] = await TemporalIncidentService(client, task_queue).node_health(a.cluster)
        assert (shown.node, shown.phase) == ("node2", Phase.ESCALATED)


async def test_someone_elses_drain_is_left_alone(client: Client, task_queue: str, tmp_path: Path) -> None:
    # The check says it started, then waits for the test's gate: the administrator's takeover happens
    # while goodput's check runs, whatever the machine's load.
    started, gate = tmp_path / "started", tmp_path / "gate"
    check = (f"import os, time\nopen({str(started)!r}, 'w').close()\n"
             f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)")
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "check_command": (sys.executable, "-c", check)})})
    fake = FakeScheduler()
    async with running_worker(client, task_queue, scheduler=fake):
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        await eventually(started.exists, timeout=30, what="the check started")  # an administrator takes over
        await fake.resume_node("node2", (await fake.get_node("node2")).reason)
        await fake.drain_node("node2", "bad PSU, ticket 4711")
        gate.touch()
        final = await asyncio.wait_for(health(client, a.cluster, "node2"), 30)
    assert final.phase is Phase.NOT_OURS and "drained by someone else" in final.why
    node = await fake.get_node("node2")
    assert node.drained and node.reason == "bad PSU, ticket 4711"


def _gated_check(tmp_path: Path) -> tuple[Path, Path, tuple[str, ...]]:
    """A check that says it started and waits for the test's gate the first time, and passes at
    once after that: the test changes the node while goodput's first check runs."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    check = (f"import os, time\nif not os.path.exists({str(started)!r}):\n"
             f"    open({str(started)!r}, 'w').close()\n"
             f"    while not os.path.exists({str(gate)!r}): time.sleep(0.05)")
    return started, gate, (sys.executable, "-c", check)


async def test_goodputs_later_drain_for_another_incident_is_left_alone(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    """The node was resumed and drained again by goodput for incident B while A's return checked it
    (B's own return not started): A's return must not undo B's drain."""
    started, gate, check = _gated_check(tmp_path)
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={"check_command": check})})
    fake = FakeScheduler()
    async with running_worker(client, task_queue, scheduler=fake):
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        await eventually(started.exists, timeout=30, what="the check started")
        await fake.resume_node("node2", (await fake.get_node("node2")).reason)
        b_reason = drain_reason("inc-B", "Xid 48 on node2")
        await fake.drain_node("node2", b_reason)
        gate.touch()
        final = await asyncio.wait_for(health(client, a.cluster, "node2"), 30)
    assert final.phase is Phase.NOT_OURS and "drained again by goodput for incident inc-B" in final.why
    node = await fake.get_node("node2")
    assert node.drained and node.reason == b_reason


async def test_a_drain_signalled_during_the_check_is_quarantined_for(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    """goodput drained the node again for B (and told its return) while A's check ran: no return
    for A; B's quarantine and check follow, and B's drain is the one undone."""
    started, gate, check = _gated_check(tmp_path)
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "check_command": check, "offence_window_s": 0.5})})
    fake = FakeScheduler()
    async with running_worker(client, task_queue, scheduler=fake):
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        await eventually(started.exists, timeout=30, what="the check started")
        await fake.resume_node("node2", (await fake.get_node("node2")).reason)
        await fake.drain_node("node2", drain_reason("fault-switch-leaf1-1796346000", "GPU fault under leaf1"))
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(a.cluster, "node2"))
        await handle.signal(NodeHealthWorkflow.drained_again, args=["inc-B", ("fault-switch-leaf1-1796346000",)])
        gate.touch()
        final = await asyncio.wait_for(handle.result(), 30)
    # (not `drains`: the short offence window may already have let A's drain out of it)
    assert final.phase is Phase.RETURNED and final.incident_id == "inc-B", final
    assert final.faults == ("fault-switch-leaf1-1796346000",)
    assert not (await fake.get_node("node2")).drained
    assert [e.op for e in fake.journal() if e.target == "node2"] == ["drain", "resume", "drain", "resume"]


async def test_an_operator_ends_the_quarantine_and_the_check_still_decides(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    """`goodput nodes return`: the long quarantine ends at once, the check runs, the audit names who asked;
    a node whose return is not goodput's to shorten (escalated, unknown) is refused with why."""
    marker = tmp_path / "checked"
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "quarantine_s": 3600.0, "offence_window_s": 0.5,
        "check_command": (sys.executable, "-c", f"open({str(marker)!r}, 'w').write('{{node}}')")})})
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue, audit_log=log) as fake:
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(a.cluster, "node2"))
        assert (await handle.query(NodeHealthWorkflow.status)).phase is Phase.QUARANTINED
        answer = await service.request_node_return(a.cluster, "node2",
                                                   OperatorDecision(who="erin", reason="PSU replaced"))
        assert "quarantine ended by erin" in answer
        final = await asyncio.wait_for(handle.result(), 30)  # well inside the hour's quarantine
        assert final.phase is Phase.RETURNED and marker.read_text() == "node2"
        assert not (await fake.get_node("node2")).drained
        with pytest.raises(UnknownIncidentError):
            await service.request_node_return(a.cluster, "node9", OperatorDecision(who="erin", reason="x"))
    [undrain] = [r for r in log.read() if r.action is AuditAction.UNDRAIN]
    assert undrain.reason.startswith("return requested by erin (PSU replaced) and health check passed")


async def test_an_escalated_node_cannot_be_asked_back(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"return_to_service": QUICK.model_copy(update={
        "quarantine_s": 0.1, "max_check_failures": 1,
        "check_command": (sys.executable, "-c", "import sys; sys.exit(3)")})})
    async with running_worker(client, task_queue):
        a = anomaly()
        await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(a.cluster, "node2"))
        assert (await asyncio.wait_for(handle.result(), 30)).phase is Phase.ESCALATED
        with pytest.raises(DecisionRejectedError, match="node node2: it was escalated to a person"):
            await TemporalIncidentService(client, task_queue).request_node_return(
                a.cluster, "node2", OperatorDecision(who="erin", reason="looks fine"))
    assert return_refusal(NodeHealthState(cluster="c", node="n1", phase=Phase.ESCALATED)).startswith(
        "node n1: it was escalated")
    assert return_refusal(NodeHealthState(cluster="c", node="n1")) == ""
