"""NVSentinel's health events: the pure rules (triage, mapping, dedup, CloudEvents) and the intake
against the fake scheduler. The transports themselves are in tests/integration/test_nvsentinel.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.adapters.nvsentinel import (
    JsonIncoming,
    NvSentinelIntake,
    Outcome,
    ProtoIncoming,
    event_from_proto,
    event_to_proto,
)
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import (
    BehaviourOverrides,
    CloudEventError,
    DedupWindow,
    Disposition,
    HealthEvent,
    NodeEvidence,
    NvSentinelEventError,
    NvSentinelSettings,
    ProcessingStrategy,
    RecommendedAction,
    dedup_key,
    event_anomalies,
    impacted_gpus,
    parse_cloudevent,
    parse_event,
    running_on,
    slurm_node_candidates,
    token_accepted,
    triage,
    triage_json,
    verdict_event,
)
from goodput.detect.watch import OptInRule
from goodput.diagnose.attribution import attribute
from goodput.models import AnomalyKind, AnomalySource, Category, CulpritKind
from goodput.ownership import drain_reason
from goodput.scheduler import JobInfo, JobState, NotOwnedError, TransientSchedulerError
from tests.fakes.sink import RecordingSink

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
UUID = "GPU-8d0c5a7e-1f2b-4c3d-9e8f-0123456789ab"


def xid_event(**update: Any) -> dict[str, Any]:
    """What NVSentinel's syslog monitor reports for Xid 79, as protobuf JSON."""
    event: dict[str, Any] = {
        "version": 1, "agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError",
        "isFatal": True, "isHealthy": False, "message": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "recommendedAction": "RESTART_BM", "errorCode": ["79"],
        "entitiesImpacted": [{"entityType": "PCI", "entityValue": "0000:3b:00.0"},
                             {"entityType": "GPU_UUID", "entityValue": UUID}],
        "metadata": {"chassis_serial": "1234"}, "generatedTimestamp": "2026-11-29T09:29:58Z",
        "nodeName": "node1", "processingStrategy": "EXECUTE_REMEDIATION",
    }
    event.update(update)
    return {k: v for k, v in event.items() if v is not None}


def none_event(**update: Any) -> dict[str, Any]:
    """The ~99%: a passing check, nothing recommended (proto3 JSON omits the defaults)."""
    return {"agent": "gpu-health-monitor", "componentClass": "GPU", "checkName": "GpuMemWatch",
            "isHealthy": True, "nodeName": "node1", **update}


class CountingScheduler(FakeScheduler):
    """The demo cluster (node1..node8; jobs 1001 on node1+2, 1002 on node3+4, 1003 on node5+6), counting reads."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.failing = False

    async def get_node(self, name: str) -> Any:
        self.calls.append(f"get_node {name}")
        if self.failing:
            raise TransientSchedulerError("slurmctld is restarting")
        return await super().get_node(name)

    async def list_jobs(self) -> Sequence[JobInfo]:
        self.calls.append("list_jobs")
        return await super().list_jobs()


class Clock:
    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def intake(scheduler: FakeScheduler | None = None, sink: RecordingSink | None = None, clock: Clock | None = None,
           **settings: Any) -> NvSentinelIntake:
    return NvSentinelIntake(NvSentinelSettings(**settings), scheduler or CountingScheduler(), sink or RecordingSink(),
                            "lab", clock=clock or Clock())


# -- triage ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "disposition", "blame"), [
    ({"is_healthy": True, "is_fatal": True}, Disposition.IGNORED, True),
    ({}, Disposition.IGNORED, True),
    ({"strategy": ProcessingStrategy.STORE_ONLY}, Disposition.IGNORED, True),
    ({"is_fatal": True, "strategy": ProcessingStrategy.STORE_ONLY}, Disposition.EVIDENCE, True),
    ({"action": RecommendedAction.RUN_FIELDDIAG}, Disposition.EVIDENCE, True),
    ({"is_fatal": True}, Disposition.FATAL, True),
    ({"is_fatal": True, "action": RecommendedAction.REPLACE_VM}, Disposition.FATAL, True),
    ({"is_fatal": True, "action": RecommendedAction.RESTART_APP}, Disposition.FATAL, False),
    ({"is_fatal": True, "quarantine": BehaviourOverrides(skip=True)}, Disposition.FATAL, False),
    ({"is_fatal": True, "drain": BehaviourOverrides(skip=True)}, Disposition.EVIDENCE, True),
    ({"quarantine": BehaviourOverrides(force=True)}, Disposition.FATAL, True),
])
def test_triage(fields: dict[str, Any], disposition: Disposition, blame: bool) -> None:
    args: dict[str, Any] = {"is_fatal": False, "is_healthy": False, "action": RecommendedAction.NONE, **fields}
    verdict = triage(**args)
    assert (verdict.disposition, verdict.blame_node) == (disposition, blame)


@pytest.mark.parametrize("data", [
    none_event(), none_event(isHealthy=False), none_event(isHealthy=False, processingStrategy="STORE_ONLY"),
    none_event(isHealthy=False, recommendedAction=0), xid_event(), xid_event(isFatal=False),
    xid_event(isFatal=False, recommendedAction=None), xid_event(processingStrategy="STORE_ONLY"),
    none_event(isHealthy=False, quarantineOverrides={"force": True}),
    none_event(isHealthy=False, drainOverrides={"skip": True}),
])
def test_the_quick_json_triage_agrees_with_the_full_one(data: dict[str, Any]) -> None:
    quick = triage_json(data)
    full = parse_event(data).triage()
    assert quick is None or quick.disposition == full.disposition


def test_the_quick_json_triage_never_ignores_what_it_cannot_read() -> None:
    assert triage_json(none_event(isHealthy=False, isFatal="true")) is None
    with pytest.raises(NvSentinelEventError, match="isFatal"):
        parse_event(none_event(isHealthy=False, isFatal="true"))


# -- the model --------------------------------------------------------------------------------------------


def test_parses_protobuf_json_with_names_numbers_and_unknown_values() -> None:
    event = parse_event(xid_event())
    assert (event.check_name, event.is_fatal, event.recommended_action, event.error_code, event.node_name) == (
        "SysLogsXIDError", True, RecommendedAction.RESTART_BM, ("79",), "node1")
    assert event.generated_timestamp == datetime(2026, 11, 29, 9, 29, 58, tzinfo=UTC)
    assert parse_event(xid_event(recommendedAction=24)).recommended_action is RecommendedAction.RESTART_BM
    # a newer NVSentinel's action is still an action, never NONE
    assert parse_event(xid_event(recommendedAction="REPLACE_NODE_V2")).recommended_action is RecommendedAction.UNKNOWN
    assert parse_event(xid_event(recommendedAction=77)).recommended_action is RecommendedAction.UNKNOWN
    assert parse_event(xid_event(processingStrategy=2)).processing_strategy is ProcessingStrategy.STORE_ONLY


def test_the_legacy_enum_spelling_decodes_the_same() -> None:
    """`RecommenedAction` (older protos) differs in its type name only, which never travels: the same
    numbers, and in JSON the same value names."""
    legacy = pb.HealthEvent(isFatal=True, recommendedAction=25, nodeName="node1")  # REPLACE_VM by number
    assert event_from_proto(pb.HealthEvent.FromString(legacy.SerializeToString())).recommended_action is (
        RecommendedAction.REPLACE_VM)
    for action, number in ((a, a.number) for a in RecommendedAction):
        assert pb.RecommendedAction.Value(action.value) == number


def test_hostile_fields_are_bounded_and_cleaned() -> None:
    event = parse_event(xid_event(message="line one\nforged: line two" + "x" * 10_000,
                                  errorCode=[str(i) for i in range(1000)],
                                  entitiesImpacted=[{"entityType": "GPU", "entityValue": str(i)} for i in range(500)],
                                  checkName="a\x00b" * 1000))
    assert "\n" not in event.message and len(event.message) < 4200
    assert len(event.error_code) == 32 and len(event.entities_impacted) == 32
    assert "\x00" not in event.check_name and len(event.check_name) < 300
    for bad in ({"isFatal": 1}, {"errorCode": "79"}, {"entitiesImpacted": [7]}, {"nodeName": ["x"]},
                {"generatedTimestamp": "yesterday"}, {"processingStrategy": "MAYBE"}, {"version": -1}):
        with pytest.raises(NvSentinelEventError):
            parse_event(xid_event(**bad))
    with pytest.raises(NvSentinelEventError, match="JSON object"):
        parse_event(["not", "an", "event"])


def test_proto_and_model_round_trip() -> None:
    event = parse_event(xid_event(drainOverrides={"force": True}))
    again = event_from_proto(event_to_proto(event))
    assert again == event
    with pytest.raises(NvSentinelEventError, match="generatedTimestamp"):
        bad = pb.HealthEvent(nodeName="node1", isFatal=True)
        bad.generatedTimestamp.seconds = 2**62
        event_from_proto(bad)


# -- mapping ---------------------------------------------------------------------------------------------


def jobs() -> list[JobInfo]:
    return [JobInfo(job_id="42", state=JobState.RUNNING, nodes=("node1", "node2"), comment="goodput:opt-in",
                    restart_count=2),
            JobInfo(job_id="43", state=JobState.RUNNING, nodes=("node1",), comment="no thanks"),
            JobInfo(job_id="44", state=JobState.PENDING, nodes=("node1",), comment="goodput:opt-in"),
            JobInfo(job_id="45", state=JobState.RUNNING, nodes=("node3",), comment="goodput:opt-in")]


def test_a_fatal_xid_becomes_an_anomaly_for_each_opted_in_job_running_on_the_node() -> None:
    event = parse_event(xid_event())
    running = running_on("node1", jobs(), OptInRule())
    [anomaly] = event_anomalies(event, node="node1", cluster="lab", jobs=running, now=NOW)
    assert (anomaly.job_id, anomaly.job_attempt, anomaly.cluster) == ("42", 2, "lab")
    assert (anomaly.source, anomaly.kind, anomaly.category) == (AnomalySource.GPU, AnomalyKind.GPU_FAULT,
                                                                Category.GPU_HARDWARE)
    assert anomaly.nodes == ("node1",) and anomaly.gpus == (UUID,)
    assert anomaly.signature_ids == ("xid-79",)
    assert anomaly.observed_at == datetime(2026, 11, 29, 9, 29, 58, tzinfo=UTC) and anomaly.detected_at == NOW
    text = "\n".join(anomaly.evidence)
    for part in ("SysLogsXIDError", "[79]", "RESTART_BM", "FALLEN_OFF_THE_BUS", "syslog-health-monitor", UUID):
        assert part in text
    verdict = attribute([anomaly], running[0])
    assert verdict.drain and verdict.culprit_nodes == ("node1",)
    assert [c.id for c in verdict.culprits if c.kind is CulpritKind.GPU] == [UUID]
    # the same fault on the same job attempt has the same id: a redelivery coalesces in the incident
    [again] = event_anomalies(event, node="node1", cluster="lab", jobs=running, now=NOW + timedelta(minutes=5))
    assert again.id == anomaly.id


def test_restart_app_and_quarantine_skip_restart_the_job_without_blaming_the_node() -> None:
    for update in ({"recommendedAction": "RESTART_APP"}, {"quarantineOverrides": {"skip": True}}):
        event = parse_event(xid_event(**update))
        [anomaly] = event_anomalies(event, node="node1", cluster="lab", jobs=jobs()[:1], now=NOW)
        verdict = attribute([anomaly], jobs()[0])
        assert anomaly.nodes == () and not verdict.drain and verdict.restart


def test_components_map_to_categories_and_gpus_to_culprits() -> None:
    for component, category in (("GPU", Category.GPU_HARDWARE), ("NVSwitch", Category.NVLINK),
                                ("NIC", Category.NETWORK), ("CPU", Category.NODE_FAILURE), ("", Category.NODE_FAILURE)):
        [anomaly] = event_anomalies(parse_event(xid_event(componentClass=component)), node="node1", cluster="lab",
                                    jobs=jobs()[:1], now=NOW)
        assert anomaly.category is category
    pci_only = parse_event(xid_event(entitiesImpacted=[{"entityType": "PCI", "entityValue": "0000:3B:00.0"},
                                                       {"entityType": "PCI", "entityValue": "not;a pci id"}]))
    assert impacted_gpus(pci_only, "node1") == ("0000:3b:00.0",)
    index_only = parse_event(xid_event(entitiesImpacted=[{"entityType": "GPU", "entityValue": "3"}]))
    assert impacted_gpus(index_only, "node1") == ("node1:gpu3",)


def test_a_future_timestamp_is_clamped_and_evidence_notes_someone_elses_drain() -> None:
    from goodput.scheduler import NodeInfo
    event = parse_event(xid_event(generatedTimestamp="2030-01-01T00:00:00Z"))
    info = NodeInfo(name="node1", state="MIXED", flags=("DRAIN",), reason="NVSentinel: cordoned", reason_user="slurm")
    [anomaly] = event_anomalies(event, node="node1", cluster="lab", jobs=jobs()[:1], now=NOW, node_info=info)
    assert anomaly.observed_at == NOW
    assert any("not goodput's drain" in line and "NVSentinel: cordoned" in line for line in anomaly.evidence)


def test_node_names_are_checked_and_mapped() -> None:
    assert slurm_node_candidates("gpu-07.cluster.local", {}) == ["gpu-07.cluster.local", "gpu-07"]
    assert slurm_node_candidates("k8s-node-a", {"k8s-node-a": "gpu07"}) == ["gpu07"]
    for bad in ("", "node1;reboot", "-rf"):
        with pytest.raises(NvSentinelEventError):
            slurm_node_candidates(bad, {})


# -- dedup and evidence ------------------------------------------------------------------------------------


def test_the_dedup_key_is_nvsentinels() -> None:
    event = parse_event(xid_event())
    reordered = parse_event(xid_event(entitiesImpacted=list(reversed(xid_event()["entitiesImpacted"])),
                                      generatedTimestamp="2026-11-29T09:31:00Z", message="again"))
    assert dedup_key(event) == dedup_key(reordered)
    for other in (xid_event(nodeName="node2"), xid_event(checkName="GpuXid"), xid_event(errorCode=["48"]),
                  xid_event(processingStrategy="STORE_ONLY"), xid_event(isHealthy=True),
                  xid_event(entitiesImpacted=[])):
        assert dedup_key(parse_event(other)) != dedup_key(event)


def test_dedup_window_expires_forgets_and_stays_bounded() -> None:
    window = DedupWindow(window_s=60, max_keys=3)
    window.remember("a", "node1", "xid", NOW)
    assert window.seen("a", NOW + timedelta(seconds=59)) and not window.seen("a", NOW + timedelta(seconds=61))
    for key in "bcde":
        window.remember(key, "node1", f"check-{key}", NOW)
    assert len(window) == 3 and not window.seen("b", NOW)
    window.remember("f", "node2", "xid", NOW)
    assert window.forget_check("node2", "xid") == 1 and not window.seen("f", NOW)
    assert window.forget_check("node9", "xid") == 0


def test_node_evidence_is_bounded() -> None:
    book = NodeEvidence(per_node=2, max_nodes=2)
    for i in range(5):
        book.record("node1", NOW + timedelta(seconds=i), f"line {i}")
    book.record("node2", NOW, "other")
    book.record("node3", NOW, "third")
    assert book.nodes() == 2 and book.recent("node1", NOW) == []
    assert book.recent("node3", NOW) == ["third"]


# -- CloudEvents ------------------------------------------------------------------------------------------


def cloudevent(event: object = None, **update: Any) -> bytes:
    document: dict[str, Any] = {"specversion": "1.0", "id": "4f0c", "source": "nvsentinel/cluster-a",
                                "type": "com.nvidia.nvsentinel.healthevent", "datacontenttype": "application/json",
                                "data": {"metadata": {"cluster": "cluster-a"},
                                         "healthEvent": xid_event() if event is None else event}}
    document.update(update)
    return json.dumps(document).encode()


def test_parses_a_structured_cloudevent() -> None:
    parsed = parse_cloudevent(cloudevent())
    assert (parsed.id, parsed.source) == ("4f0c", "nvsentinel/cluster-a")
    assert parse_event(parsed.event).check_name == "SysLogsXIDError"


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[]", "batched mode"),
    (cloudevent(specversion="0.3"), "specversion"),
    (cloudevent(id=""), "'id'"),
    (cloudevent(data={"metadata": {}}), "healthEvent"),
    (cloudevent(data="text"), "no data object"),
    (cloudevent(datacontenttype="text/plain"), "datacontenttype"),
    (b'{"specversion": "1.0", "n": ' + b"9" * 5000 + b"}", "not JSON"),
    (b'{"a": NaN}', "not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"specversion": "1.0", "data": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "nested"),
])
def test_malformed_cloudevents_are_refused_with_a_reason(body: bytes, message: str) -> None:
    with pytest.raises(CloudEventError, match=message):
        parse_cloudevent(body)


# -- settings and tokens -----------------------------------------------------------------------------------


def test_settings_refuse_an_exposed_receiver_without_a_token() -> None:
    with pytest.raises(ValueError, match="without a token"):
        NvSentinelSettings(enabled=True, grpc_host="0.0.0.0")
    NvSentinelSettings(enabled=True, grpc_host="0.0.0.0", tokens=("t" * 16,))
    with pytest.raises(ValueError, match="no longer honoured"):
        NvSentinelSettings(enabled=True, http_host="10.0.0.5", allow_unauthenticated=True)
    with pytest.raises(ValueError, match="shorter"):
        NvSentinelSettings(tokens=("short",))
    with pytest.raises(ValueError, match="node name"):
        NvSentinelSettings(node_names={"k8s-a": "bad name"})
    with pytest.raises(ValueError, match="extra"):
        NvSentinelSettings.model_validate({"enabeld": True})


def test_tokens() -> None:
    tokens = ("a" * 20, "b" * 20)
    assert token_accepted(f"Bearer {'b' * 20}", tokens) and token_accepted(f"bearer {'a' * 20}", tokens)
    for header in (None, "", "Bearer", f"Basic {'a' * 20}", "Bearer " + "a" * 19):
        assert not token_accepted(header, tokens)
    assert token_accepted(None, ())


# -- the intake ---------------------------------------------------------------------------------------------


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


def test_a_health_event_model_is_frozen() -> None:
    event = HealthEvent(node_name="node1")
    with pytest.raises(ValueError, match="frozen"):
        event.node_name = "node2"  # type: ignore[misc]


# -- OAuth client credentials (the event exporter's way to a bearer token) -----------------------------


def test_minted_access_tokens_verify_expire_and_die_with_their_secret() -> None:
    from goodput.detect.nvsentinel import access_token_valid, mint_access_token
    clients = {"nvsentinel-exporter": "s" * 32}
    token, ttl = mint_access_token("nvsentinel-exporter", "s" * 32, NOW, 3600)
    assert ttl == 3600 and access_token_valid(token, clients, NOW + timedelta(minutes=59))
    assert not access_token_valid(token, clients, NOW + timedelta(hours=1, seconds=1))
    assert not access_token_valid(token, {"nvsentinel-exporter": "t" * 32}, NOW)  # rotated secret
    client, expiry, mac = token.split(".")
    for forged in (f"{client}.{int(expiry) + 999}.{mac}", f"other.{expiry}.{mac}", f"{client}.{expiry}.{'0' * 64}",
                   "", "...", f"{client}.{expiry}", f"{client}.-1.{mac}"):
        assert not access_token_valid(forged, clients, NOW)


def test_a_non_ascii_mac_is_an_invalid_token_not_a_crash() -> None:
    """`compare_digest` raises TypeError on a non-ASCII str; that was an HTTP 500 for anyone (issue #26)."""
    from goodput.detect.nvsentinel import access_token_valid, mint_access_token
    clients = {"nvsentinel-exporter": "s" * 32}
    client, expiry, _ = mint_access_token("nvsentinel-exporter", "s" * 32, NOW, 3600)[0].split(".")
    for mac in ("é" * 64, "\udcff" * 64, "0" * 63 + "\u0661"):
        assert not access_token_valid(f"{client}.{expiry}.{mac}", clients, NOW)
    assert not access_token_valid(f"{client}.\u0661\u0662\u0663.{'0' * 64}", clients, NOW)  # Arabic-Indic digits


def test_client_credentials_by_basic_auth_or_form() -> None:
    import base64

    from goodput.detect.nvsentinel import client_credentials
    clients = {"exporter": "s" * 32, "other": "o" * 32}
    basic = "Basic " + base64.b64encode(b"exporter:" + b"s" * 32).decode()
    assert client_credentials({}, basic, clients) == "exporter"
    assert client_credentials({"client_id": "other", "client_secret": "o" * 32}, None, clients) == "other"
    for form, header in (({"client_id": "exporter", "client_secret": "o" * 32}, None),
                         ({"client_id": "nobody", "client_secret": "s" * 32}, None),
                         ({"client_id": "exporter"}, None), ({}, "Basic !!!"), ({}, None),
                         ({}, "Basic " + base64.b64encode(b"exporter:wrong").decode())):
        assert client_credentials(form, header, clients) is None


def test_oauth_clients_are_checked_and_protect_only_http() -> None:
    NvSentinelSettings(enabled=True, http_host="10.0.0.5", grpc_enabled=False, oauth_clients={"exporter": "s" * 16})
    with pytest.raises(ValueError, match="without a token"):  # gRPC has no OAuth: it needs a token of its own
        NvSentinelSettings(enabled=True, grpc_host="10.0.0.5", oauth_clients={"exporter": "s" * 16})
    with pytest.raises(ValueError, match="shorter"):
        NvSentinelSettings(oauth_clients={"exporter": "short"})
    with pytest.raises(ValueError, match="client id"):
        NvSentinelSettings(oauth_clients={"bad id": "s" * 16})


def test_no_receiver_runs_without_a_credential_even_on_loopback() -> None:
    """On a head or login node loopback is every local account: a receiver with no credential would
    let any of them drain a node with one forged fatal event (issue #26)."""
    with pytest.raises(ValueError, match="without a token"):
        NvSentinelSettings(enabled=True)
    with pytest.raises(ValueError, match="HTTP receiver"):  # TokenReview guards gRPC only, not the HTTP side
        NvSentinelSettings(enabled=True, token_review={"enabled": True,
                                                       "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
    NvSentinelSettings(enabled=True, http_enabled=False,
                       token_review={"enabled": True, "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
    NvSentinelSettings(enabled=True, grpc_enabled=False, oauth_clients={"exporter": "s" * 16})
    NvSentinelSettings(enabled=True, tokens=("t" * 16,))
    with pytest.raises(ValueError, match="no longer honoured"):  # loopback is not an identity: no way around it
        NvSentinelSettings(enabled=True, allow_unauthenticated=True)


def test_token_review_settings() -> None:
    from goodput.detect.nvsentinel import TokenReviewSettings
    with pytest.raises(ValueError, match="allowed_users"):
        TokenReviewSettings(enabled=True)
    with pytest.raises(ValueError, match="https"):
        TokenReviewSettings(api_url="http://10.0.0.1:6443")
    # a ServiceAccount token is a credential: an exposed gRPC receiver may rely on it alone
    NvSentinelSettings(enabled=True, grpc_host="10.0.0.5", http_enabled=False,
                       token_review={"enabled": True, "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
