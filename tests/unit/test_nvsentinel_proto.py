"""The committed NVSentinel protobuf modules: what scripts/gen_nvsentinel_proto.sh makes, wire-compatible
with NVSentinel's interface (names and numbers), and loadable on the installed protobuf runtime."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import __version__ as protobuf_version
from google.protobuf.descriptor import FieldDescriptor

from activities.adapters.nvsentinel.proto import health_event_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO / "activities" / "adapters" / "nvsentinel" / "proto"
GENERATED = ("health_event_pb2.py", "health_event_pb2.pyi", "health_event_pb2_grpc.py")

# NVSentinel's data-models/protobufs/health_event.proto, field by field: (name, number, type, repeated).
T = FieldDescriptor
HEALTH_EVENT = [
    ("version", 1, T.TYPE_UINT32, False), ("agent", 2, T.TYPE_STRING, False),
    ("componentClass", 3, T.TYPE_STRING, False), ("checkName", 4, T.TYPE_STRING, False),
    ("isFatal", 5, T.TYPE_BOOL, False), ("isHealthy", 6, T.TYPE_BOOL, False), ("message", 7, T.TYPE_STRING, False),
    ("recommendedAction", 8, T.TYPE_ENUM, False), ("errorCode", 9, T.TYPE_STRING, True),
    ("entitiesImpacted", 10, T.TYPE_MESSAGE, True), ("metadata", 11, T.TYPE_MESSAGE, True),
    ("generatedTimestamp", 12, T.TYPE_MESSAGE, False), ("nodeName", 13, T.TYPE_STRING, False),
    ("quarantineOverrides", 14, T.TYPE_MESSAGE, False), ("drainOverrides", 15, T.TYPE_MESSAGE, False),
    ("processingStrategy", 16, T.TYPE_ENUM, False),
]


def _fields(descriptor: object) -> list[tuple[str, int, int, bool]]:
    return [(f.name, f.number, f.type, f.is_repeated) for f in descriptor.fields]  # type: ignore[attr-defined]


def test_the_messages_carry_nvsentinels_names_and_numbers() -> None:
    assert pb.DESCRIPTOR.package == "datamodels"
    assert _fields(pb.HealthEvent.DESCRIPTOR) == HEALTH_EVENT
    assert _fields(pb.HealthEvents.DESCRIPTOR) == [("version", 1, T.TYPE_UINT32, False),
                                                   ("events", 2, T.TYPE_MESSAGE, True)]
    assert _fields(pb.Entity.DESCRIPTOR) == [("entityType", 1, T.TYPE_STRING, False),
                                             ("entityValue", 2, T.TYPE_STRING, False)]
    assert _fields(pb.BehaviourOverrides.DESCRIPTOR) == [("force", 1, T.TYPE_BOOL, False),
                                                         ("skip", 2, T.TYPE_BOOL, False)]
    assert dict(pb.RecommendedAction.items()) == {
        "NONE": 0, "COMPONENT_RESET": 2, "CONTACT_SUPPORT": 5, "RUN_FIELDDIAG": 6, "RESTART_VM": 15,
        "RESTART_BM": 24, "REPLACE_VM": 25, "RUN_DCGMEUD": 26, "RESTART_APP": 39, "UNKNOWN": 99}
    assert dict(pb.ProcessingStrategy.items()) == {"UNSPECIFIED": 0, "EXECUTE_REMEDIATION": 1, "STORE_ONLY": 2}
    [method] = pb.DESCRIPTOR.services_by_name["PlatformConnector"].methods
    assert (method.name, method.input_type.full_name, method.output_type.full_name) == (
        "HealthEventOccurredV1", "datamodels.HealthEvents", "google.protobuf.Empty")


def test_the_proto_names_whose_interface_it_is() -> None:
    header = (PROTO_DIR / "health_event.proto").read_text().split("syntax")[0]
    assert "NVIDIA/NVSentinel" in header and "Apache License 2.0" in header
    assert "data-models/protobufs/health_event.proto" in header


def test_the_generated_code_runs_on_the_installed_protobuf() -> None:
    """The modules check the runtime when imported (ValidateProtobufRuntimeVersion): importing is the
    check, and the runtime is not older than the generator."""
    generated = (PROTO_DIR / "health_event_pb2.py").read_text()
    line = next(x for x in generated.splitlines() if x.startswith("# Protobuf Python Version:"))
    made_with = tuple(int(p) for p in line.split(":")[1].strip().split("."))
    assert tuple(int(p) for p in protobuf_version.split(".")[:3]) >= made_with
    assert pb.HealthEvent(nodeName="n").SerializeToString()


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools (the dev extra) is missing")
def test_regenerating_gives_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "gen_nvsentinel_proto.sh"), str(tmp_path)], check=True,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}, capture_output=True, timeout=120)
    out = tmp_path / "activities" / "adapters" / "nvsentinel" / "proto"
    for name in GENERATED:
        assert (out / name).read_text() == (PROTO_DIR / name).read_text(), (
            f"{name} is stale: run scripts/gen_nvsentinel_proto.sh")
