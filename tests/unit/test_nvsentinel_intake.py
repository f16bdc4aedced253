"""NVSentinel's intake against the fake scheduler: which events cost a scheduler call, which open
an incident (once, across redeliveries), which are evidence, rejected, stale or retried, and that
NVSentinel's own drains and goodput's echoed verdicts are left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.adapters.nvsentinel import JsonIncoming, Outcome, ProtoIncoming, event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import Disposition, parse_event, verdict_event
from goodput.models import Category
from goodput.ownership import drain_reason
from goodput.scheduler import NotOwnedError
from tests.fakes.sink import RecordingSink
from tests.unit.nvsentinel_cases import NOW, UUID, Clock, CountingScheduler, intake, none_event, xid_event


async def test_nothing_recommended_costs_no_scheduler_call() -> None:
    scheduler, sink = CountingScheduler(), RecordingSink()
    receiver = intake(scheduler, sink)
    items = [JsonIncoming(none_event()), JsonIncoming(none_event(isHealthy=False)),
             ProtoIncoming(pb.HealthEvent(nodeName="node1", checkName="GpuMemWatch", isHealthy=True)),
             ProtoIncoming(pb.HealthEvent(nodeName="node1", checkName="GpuMemWatch"))]
    received = await receiver.receive(items, "test")
    assert received.outcomes[Outcome.IGNORED] == 4 and received.outcome is Outcome.IGNORED
    assert scheduler.calls == [] and sink.anomalies == [] and len(receiver.dedup) == 0


async def test_a_fatal_event_opens_an_incident_for_the_jobs_on_the_node_once() -> None:
    scheduler, sink = CountingScheduler(), RecordingSink()
    receiver = intake(scheduler, sink)
    received = await receiver.receive([JsonIncoming(xid_event())], "test")
    assert received.outcome is Outcome.INCIDENT and received.anomalies == 1
    [anomaly] = sink.anomalies
    assert (anomaly.job_id, anomaly.cluster, anomaly.nodes, anomaly.gpus) == ("1001", "lab", ("node1",), (UUID,))
    calls = len(scheduler.calls)
    # at-least-once redelivery (by either transport): no scheduler call, no second anomaly
    again = await receiver.receive([JsonIncoming(xid_event(generatedTimestamp="2026-11-29T09:29:59Z")),
                                    ProtoIncoming(event_to_proto(parse_event(xid_event())))], "test")
    assert again.outcomes[Outcome.DUPLICATE] == 2 and len(scheduler.calls) == calls and len(sink.anomalies) == 1
    # cleared, then the same fault again: handled again, and its anomaly coalesces by id
    await receiver.receive([JsonIncoming(xid_event(isHealthy=True, isFatal=False))], "test")
    third = await receiver.receive([JsonIncoming(xid_event())], "test")
    assert third.outcome is Outcome.INCIDENT and sink.anomalies[-1].id == anomaly.id


async def test_store_only_and_advice_are_evidence_shown_with_a_later_fatal_event() -> None:
    scheduler, sink = CountingScheduler(), RecordingSink()
    receiver = intake(scheduler, sink)
    received = await receiver.receive([
        JsonIncoming(xid_event(processingStrategy="STORE_ONLY")),
        JsonIncoming(xid_event(isFatal=False, recommendedAction="RUN_FIELDDIAG", checkName="DcgmHealth",
                               errorCode=["DCGM_FR_PCIE_REPLAYS"])),
        JsonIncoming(xid_event(drainOverrides={"skip": True}, checkName="Other"))], "test")
    assert received.outcomes[Outcome.EVIDENCE] == 3 and scheduler.calls == [] and sink.anomalies == []
    await receiver.receive([JsonIncoming(xid_event(checkName="GpuXidError", errorCode=["48"]))], "test")
    [anomaly] = sink.anomalies
    earlier = [line for line in anomaly.evidence if line.startswith("earlier on node1")]
    assert len(earlier) == 3 and any("RUN_FIELDDIAG" in line for line in earlier)
    assert any("STORE_ONLY" in line for line in earlier)


async def test_an_unknown_or_invalid_node_is_rejected_and_the_rest_of_the_batch_handled() -> None:
    sink = RecordingSink()
    receiver = intake(sink=sink)
    received = await receiver.receive([JsonIncoming(xid_event(nodeName="node99")),
                                       JsonIncoming(xid_event(nodeName="node1;reboot")),
                                       JsonIncoming(xid_event(isFatal="yes")),
                                       JsonIncoming(xid_event(nodeName="node3"))], "test")
    assert received.outcomes[Outcome.REJECTED] == 3 and received.outcomes[Outcome.INCIDENT] == 1
    assert "not a node Slurm knows" in received.rejected[0] and "node name" in received.rejected[1]
    assert [a.job_id for a in sink.anomalies] == ["1002"]


async def test_fqdn_and_mapped_node_names_reach_the_slurm_node() -> None:
    sink = RecordingSink()
    receiver = intake(sink=sink, node_names={"k8s-worker-5": "node5"})
    await receiver.receive([JsonIncoming(xid_event(nodeName="node3.cluster.local")),
                            JsonIncoming(xid_event(nodeName="k8s-worker-5"))], "test")
    assert sorted(a.job_id for a in sink.anomalies) == ["1002", "1003"]


async def test_no_job_stale_and_opted_out_jobs() -> None:
    sink, clock = RecordingSink(), Clock()
    receiver = intake(sink=sink, clock=clock)
    assert (await receiver.receive([JsonIncoming(xid_event(nodeName="node8"))], "test")).outcome is Outcome.NO_JOB
    clock.now = NOW + timedelta(hours=2)
    stale = await receiver.receive([JsonIncoming(xid_event(nodeName="node3"))], "test")
    assert stale.outcome is Outcome.STALE and sink.anomalies == []


async def test_transient_failures_ask_for_a_retry_and_remember_nothing() -> None:
    scheduler, sink = CountingScheduler(), RecordingSink()
    receiver = intake(scheduler, sink)
    sink.failing = True
    failed = await receiver.receive([JsonIncoming(xid_event()), JsonIncoming(xid_event(nodeName="node3"))], "test")
    assert failed.retry and failed.outcome is Outcome.RETRY and failed.outcomes[Outcome.INCIDENT] == 0
    sink.failing, scheduler.failing = False, True
    assert (await receiver.receive([JsonIncoming(xid_event())], "test")).retry == (
        "the scheduler is unavailable; retry later")
    scheduler.failing = False
    done = await receiver.receive([JsonIncoming(xid_event()), JsonIncoming(xid_event(nodeName="node3"))], "test")
    assert done.outcomes[Outcome.INCIDENT] == 2 and [a.job_id for a in sink.anomalies] == ["1001", "1002"]


async def test_a_node_nvsentinel_drained_stays_its_drain() -> None:
    """NVSentinel's cordon reaches Slurm as someone else's drain: the jobs there are still incidents,
    the evidence says whose drain it is, and goodput neither overwrites nor resumes it."""
    scheduler, sink = CountingScheduler(), RecordingSink()
    theirs = "NVSentinel: GPU fell off the bus"
    await scheduler.drain_node("node1", theirs)
    await intake(scheduler, sink).receive([JsonIncoming(xid_event())], "test")
    [anomaly] = sink.anomalies
    assert any("not goodput's drain" in line for line in anomaly.evidence)
    ours = drain_reason("incident-lab-1001-0", "gpu-hardware on node1")
    result = await scheduler.drain_node("node1", ours)
    assert not result.changed and (await scheduler.get_node("node1")).reason == theirs
    with pytest.raises(NotOwnedError):
        await scheduler.resume_node("node1", ours)
    assert [e.target for e in scheduler.journal("drain")] == ["node1"]  # only NVSentinel's own


async def test_goodputs_own_verdicts_come_back_as_nothing() -> None:
    """A verdict pushed to NVSentinel (STORE_ONLY, nothing recommended) that NVSentinel's sink sends
    back to goodput is ignored: no loop."""
    event = verdict_event(node="node1", category=Category.GPU_HARDWARE, incident_id="incident-x",
                          explanation="gpu-hardware on node1", agent="goodput", now=NOW, gpus=(UUID, "node1:gpu3"))
    assert event.store_only and event.triage().disposition is Disposition.IGNORED
    assert [e.entity_value for e in event.entities_impacted] == [UUID]
    scheduler = CountingScheduler()
    received = await intake(scheduler).receive([ProtoIncoming(event_to_proto(event))], "test")
    assert received.outcome is Outcome.IGNORED and scheduler.calls == []
