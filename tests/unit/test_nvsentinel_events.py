"""NVSentinel's health events as pure rules: triage, the event model, mapping an event to anomalies
on the jobs of its node, dedup and per-node evidence, and CloudEvents parsing. The intake that
applies them is in test_nvsentinel_intake.py; the transports in tests/integration/nvsentinel/."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.adapters.nvsentinel import event_from_proto, event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import (
    BehaviourOverrides,
    CloudEventError,
    DedupWindow,
    Disposition,
    HealthEvent,
    NodeEvidence,
    NvSentinelEventError,
    ProcessingStrategy,
    RecommendedAction,
    dedup_key,
    event_anomalies,
    impacted_gpus,
    parse_cloudevent,
    parse_event,
    running_on,
    slurm_node_candidates,
    triage,
    triage_json,
)
from goodput.detect.watch import OptInRule
from goodput.diagnose.attribution import attribute
from goodput.models import AnomalyKind, AnomalySource, Category, CulpritKind
from goodput.scheduler import JobInfo, JobState
from tests.unit.nvsentinel_cases import NOW, UUID, none_event, xid_event

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


def test_a_health_event_model_is_frozen() -> None:
    event = HealthEvent(node_name="node1")
    with pytest.raises(ValueError, match="frozen"):
        event.node_name = "node2"  # type: ignore[misc]


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
