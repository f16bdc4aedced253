"""Job layouts from goodput's Slurm prolog: the record a node sends, the mapping from a rank or a GPU
to a host, the file store, and attribution using them when evidence names a rank but no host."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.layout import LayoutStore, LayoutStoreFullError
from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.detect.push import PushConfig
from goodput.detect.push.layout import MAX_LAYOUT_BODY, LayoutBodyError, node_layout, parse_layout
from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import anomaly_from_verdict, classify_lines
from goodput.diagnose.layout import (
    GpuSlot,
    JobLayout,
    NodeCheck,
    NodeLayout,
    gpu_place,
    job_layout,
    locate,
    pci_key,
    rank_place,
    wants_layout,
)
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, CulpritKind, IncidentKey
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import AttributeInput
from goodput.scheduler import JobInfo, JobState, NodeInfo
from tests.fakes.layouts import FakeLayouts
from tests.fakes.notifier import RecordingNotifier

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NODES = ("gpu-a1", "gpu-a2", "gpu-b1")
OK = NodeCheck(status="ok", detail="nvidia-smi lists 8 GPUs")


def pci(gpu: int) -> str:
    """Identical nodes: GPU i sits at the same address on every node."""
    return f"00000000:{0x1b + 0x20 * gpu:02X}:00.0"


def slots(node: int, indices: tuple[int, ...] = (0, 1, 2, 3)) -> tuple[GpuSlot, ...]:
    return tuple(GpuSlot(index=i, pci_bus_id=pci(i), uuid=f"GPU-{node:04d}{i:04d}-0000-0000")
                 for i in indices)


def node(i: int, *, gpus: tuple[GpuSlot, ...] | None = None, nodelist: str = "gpu-a[1-2],gpu-b1",
         count: int = 3, attempt: int = 0, at: datetime = T0, **kw: Any) -> NodeLayout:
    return NodeLayout(job_id="77", attempt=attempt, node=NODES[i], node_index=i, node_count=count, nodelist=nodelist,
                      gpus=slots(i) if gpus is None else gpus, check=OK, recorded_at=at, **kw)


def layout(*nodes: NodeLayout) -> JobLayout:
    return job_layout("lab", "77", 0, nodes or (node(0), node(1), node(2)))


# -- the mapping --------------------------------------------------------------------------------

def test_block_mapping_places_each_rank_on_its_node_and_gpu() -> None:
    full = layout()
    assert full.gpus_per_node() == 4
    place = rank_place(full, 5)
    assert place is not None and (place.node, place.gpu) == ("gpu-a2", slots(1)[1])
    assert place.gpu_ref == "GPU-00010001-0000-0000"
    assert rank_place(full, 0).node == "gpu-a1" and rank_place(full, 11).node == "gpu-b1"  # type: ignore[union-attr]
    assert rank_place(full, 12) is None and rank_place(full, -1) is None


def test_local_rank_uses_slurms_gpu_order() -> None:
    # Slurm gave GPUs 6 and 2 on this node (CUDA_VISIBLE_DEVICES=6,2): local rank 0 runs on GPU 6.
    odd = node(0, gpus=slots(0, (6, 2)), nodelist="gpu-a1", count=1)
    place = rank_place(job_layout("lab", "77", 0, [odd]), 0)
    assert place is not None and place.gpu is not None and place.gpu.index == 6


@pytest.mark.parametrize("records", [
    (node(0), node(1)),                                           # a node never reported
    (node(0), node(1), node(2, gpus=slots(2, (0, 1)))),           # not uniform
    (node(0, gpus=()), node(1, gpus=()), node(2, gpus=())),       # no GPUs at all
])
def test_no_rank_mapping_unless_every_node_reported_the_same_gpus(records: tuple[NodeLayout, ...]) -> None:
    assert rank_place(layout(*records), 5) is None


def test_a_gpu_id_names_a_host_only_when_one_node_has_it() -> None:
    full = layout()
    uuid = gpu_place(full, "GPU-00020003-0000-0000")
    assert uuid is not None and uuid.node == "gpu-b1"
    # Identical nodes share PCI addresses: the address alone is every node's.
    assert gpu_place(full, "0000:3b:00") is None
    single = layout(node(0, nodelist="gpu-a1", count=1))
    assert gpu_place(single, "PCI:0000:3b:00").node == "gpu-a1"  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "key"), [
    ("00000000:3B:00.0", (0, 0x3B, 0, 0)), ("0000:3b:00", (0, 0x3B, 0, None)), ("PCI:0001:bb:01.1", (1, 0xBB, 1, 1)),
    ("3b:00.0", (0, 0x3B, 0, 0)), ("GPU-1234", None), ("0" * 40, None), ("3b:00.9", None),
])
def test_pci_spellings(text: str, key: tuple[int, int, int, int | None] | None) -> None:
    assert pci_key(text) == key


def test_newest_record_of_a_node_wins_and_other_attempts_are_left_out() -> None:
    old, new = node(0, at=T0), node(0, at=T0 + timedelta(minutes=1), gpus=slots(0, (4, 5, 6, 7)))
    other = node(1, attempt=1)
    built = job_layout("lab", "77", 0, [new, old, other])
    assert [n.gpus for n in built.nodes] == [new.gpus]


def test_a_layout_is_used_only_for_the_allocation_slurm_records() -> None:
    full = layout()
    assert locate(full, NODES, ranks=[5]).nodes == ("gpu-a2",)
    # A requeued job on other nodes, or a record set that does not match Slurm: not believed.
    for allocation in [("gpu-a1", "gpu-a2"), ("gpu-a1", "gpu-a2", "gpu-c9"), ()]:
        located = locate(full, allocation, ranks=[5])
        assert located.nodes == () and "not used" in located.note


# -- attribution --------------------------------------------------------------------------------

JOB = JobInfo(job_id="77", name="train", state=JobState.FAILED, nodes=NODES)
ECC = ["[rank5]: Traceback (most recent call last):",
       "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]


def ecc_anomaly() -> Anomaly:
    verdict = classify_lines(ECC)
    return anomaly_from_verdict(verdict, anomaly_id="log-1", job_id="77", observed_at=T0, detected_at=T0,
                                cluster="lab")


def test_a_rank_only_ecc_error_blames_the_host_and_gpu_of_that_rank() -> None:
    evidence = ecc_anomaly()
    assert (evidence.nodes, evidence.ranks) == ((), (5,)) and wants_layout([evidence])
    without = attribute([evidence], JOB)
    assert (without.category, without.drain, without.culprit_nodes) == (Category.GPU_HARDWARE, False, ())
    att = attribute([evidence], JOB, layout=layout())
    assert (att.drain, att.culprit_nodes) == (True, ("gpu-a2",))
    assert [c.id for c in att.culprits if c.kind is CulpritKind.GPU] == ["GPU-00010001-0000-0000"]
    assert "gpu-a2 GPU 1 (GPU-00010001-0000-0000): rank 5 is local rank 1 of node 1" in att.explanation


def test_a_failed_node_check_is_mentioned() -> None:
    sick = node(1, end_check=NodeCheck(status="failed", detail="nvidia-smi did not answer within 3 s"))
    att = attribute([ecc_anomaly()], JOB, layout=layout(node(0), sick, node(2)))
    assert "its epilog node check failed: nvidia-smi did not answer within 3 s" in att.explanation


def test_evidence_with_a_host_ignores_the_layout() -> None:
    xid = Anomaly(id="x", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT, job_id="77", nodes=("gpu-b1",),
                  ranks=(5,), observed_at=T0, detected_at=T0, signature_ids=("xid-79",))
    att = attribute([xid], JOB, layout=layout())
    assert att.culprit_nodes == ("gpu-b1",) and "layout" not in att.explanation
    assert not wants_layout([xid])


def test_an_application_error_never_becomes_a_node_through_the_layout() -> None:
    app = Anomaly(id="a", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, category=Category.APP_ERROR,
                  job_id="77", ranks=(5,), observed_at=T0, detected_at=T0)
    att = attribute([app], JOB, layout=layout())
    assert att.culprit_nodes == () and not att.drain


def test_without_a_job_record_the_layout_is_not_believed() -> None:
    att = attribute([ecc_anomaly()], None, layout=layout())
    assert att.culprit_nodes == () and not att.drain


# -- the record a node sends ----------------------------------------------------------------------

CONFIG = PushConfig(clusters=("other",))


def body(**changes: Any) -> bytes:
    record: dict[str, Any] = {
        "version": 1, "event": "prolog", "job_id": "77", "restart_count": 2, "node": "gpu-a2",
        "nodelist": "gpu-a[1-2],gpu-b1",
        "gpus": [{"index": 3, "pci_bus_id": "00000000:3B:00.0", "uuid": "GPU-abcdef01-2345", "serial": "1652"}],
        "check": {"status": "ok", "detail": "nvidia-smi lists 8 GPUs"}}
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None}).encode()


def test_a_record_becomes_the_nodes_layout_with_its_index_from_slurms_node_list() -> None:
    cluster, record = parse_layout(body(), CONFIG, cluster="lab")
    stored = node_layout(record, T0)
    assert (cluster, stored.job_id, stored.attempt, stored.node_index, stored.node_count) == ("lab", "77", 2, 1, 3)
    assert stored.gpus == (GpuSlot(index=3, pci_bus_id="00000000:3B:00.0", uuid="GPU-abcdef01-2345", serial="1652"),)
    assert parse_layout(body(cluster="other"), CONFIG, cluster="lab")[0] == "other"


@pytest.mark.parametrize(("changes", "why"), [
    ({"job_id": 77}, "job_id: Input should be a valid string"),
    ({"job_id": "77_1"}, "job_id: String should match pattern"),
    ({"node": "../../etc"}, "invalid node name"),
    ({"node": "gpu-c9"}, "not in the job's node list"),
    ({"nodelist": "x[1-99999999]"}, "more than"),
    ({"nodelist": "a b"}, "nodelist: String should match pattern"),
    ({"cluster": "elsewhere"}, "not served here"),
    ({"version": 2}, "version"),
    ({"shell": "$(id)"}, "shell: Extra inputs are not permitted"),
    ({"gpus": [{"index": 0, "pci_bus_id": "x;y"}]}, "gpus.0.pci_bus_id"),
    ({"gpus": [{"index": 0}, {"index": 0}]}, "a GPU index appears twice"),
    ({"gpus": [{"index": i} for i in range(65)]}, "gpus: Tuple should have at most 64 items"),
    ({"check": {"status": "ok", "detail": "a\nb"}}, "check.detail"),
    ({"check": {"status": "fine"}}, "check.status"),
    ({"restart_count": -1}, "restart_count"),
])
def test_bad_records_are_refused_with_the_field_that_is_wrong(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(LayoutBodyError, match=None) as refused:
        _, record = parse_layout(body(**changes), CONFIG, cluster="lab")
        node_layout(record, T0)
    assert why in str(refused.value)


@pytest.mark.parametrize("raw", [b"", b"[]", b"nope", b"\xff", b"{" * 100, b" " * (MAX_LAYOUT_BODY + 1)])
def test_bodies_that_are_not_records(raw: bytes) -> None:
    with pytest.raises(LayoutBodyError):
        parse_layout(raw, CONFIG, cluster="lab")


# -- the store ----------------------------------------------------------------------------------

def test_store_round_trip_and_the_epilog_update(tmp_path: Path) -> None:
    store = LayoutStore(tmp_path)
    for i in range(3):
        store.put("lab", node(i))
    assert store.job_layout("lab", "77", 0) == layout()
    store.end("lab", node(1, at=T0 + timedelta(hours=1)).model_copy(
        update={"check": NodeCheck(status="failed", detail="gone")}))
    ended = store.job_layout("lab", "77", 0).by_index()[1]  # type: ignore[union-attr]
    assert ended.ended_at == T0 + timedelta(hours=1) and ended.end_check == NodeCheck(status="failed", detail="gone")
    assert ended.check == OK and ended.gpus == slots(1)
    path = tmp_path / "lab" / "77" / "0" / "gpu-a2.json"
    assert path.stat().st_mode & 0o777 == 0o600 and (tmp_path / "lab").stat().st_mode & 0o777 == 0o700
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_store_misses_and_hostile_lookups(tmp_path: Path) -> None:
    store = LayoutStore(tmp_path)
    store.put("lab", node(0))
    assert store.job_layout("lab", "78", 0) is None
    assert store.job_layout("lab", "77", 1) is None
    assert store.job_layout("../lab", "77", 0) is None and store.job_layout("lab", "../77", 0) is None
    # A damaged file is skipped, not fatal.
    (tmp_path / "lab" / "77" / "0" / "gpu-a2.json").write_text("{not json")
    assert [n.node for n in store.job_layout("lab", "77", 0).nodes] == ["gpu-a1"]  # type: ignore[union-attr]


def test_store_keeps_a_bounded_number_of_nodes_and_jobs(tmp_path: Path) -> None:
    store = LayoutStore(tmp_path, max_nodes_per_job=2)
    store.put("lab", node(0))
    store.put("lab", node(1))
    store.put("lab", node(1))  # a node may report again
    with pytest.raises(LayoutStoreFullError):
        store.put("lab", node(2))
    for job, age in (("77", 40), ("10", 30), ("11", 20), ("12", 10)):
        store.put("lab", node(0).model_copy(update={"job_id": job}))
        os.utime(tmp_path / "lab" / job, (T0.timestamp() - age, T0.timestamp() - age))
    assert LayoutStore(tmp_path, max_jobs=2).prune("lab", now=T0) == 2
    assert sorted(p.name for p in (tmp_path / "lab").iterdir()) == ["11", "12"]


def test_store_forgets_old_jobs(tmp_path: Path) -> None:
    clock = [T0]
    store = LayoutStore(tmp_path, max_age=timedelta(days=1), prune_every=timedelta(0), clock=lambda: clock[0])
    store.put("lab", node(0))
    os.utime(tmp_path / "lab" / "77", ((T0 - timedelta(days=2)).timestamp(),) * 2)
    store.put("lab", node(0).model_copy(update={"job_id": "78"}))
    assert store.job_layout("lab", "77", 0) is None and store.job_layout("lab", "78", 0) is not None


# -- the attribute activity -------------------------------------------------------------------

def activity_for(layouts: FakeLayouts) -> RecoveryActivities:
    scheduler = FakeScheduler(FakeClusterState(nodes={n: NodeInfo(name=n, state="IDLE") for n in NODES}))
    scheduler.add_job(JOB)
    return RecoveryActivities(scheduler, RecordingNotifier(), LocalDrainGate(), layouts=layouts)


def attribute_input(*evidence: Anomaly) -> AttributeInput:
    return AttributeInput(incident_id="inc", key=IncidentKey(cluster="lab", job_id="77", job_attempt=0),
                          anomalies=evidence)


async def test_the_activity_reads_the_layout_only_when_evidence_needs_it() -> None:
    layouts = FakeLayouts(layout())
    activities = activity_for(layouts)
    located = await ActivityEnvironment().run(activities.attribute, attribute_input(ecc_anomaly()))
    assert located.attribution.culprit_nodes == ("gpu-a2",) and layouts.reads == [("lab", "77", 0)]
    hosted = ecc_anomaly().model_copy(update={"nodes": ("gpu-b1",)})
    result = await ActivityEnvironment().run(activities.attribute, attribute_input(hosted))
    assert result.attribution.culprit_nodes == ("gpu-b1",) and len(layouts.reads) == 1


async def test_a_broken_layout_store_never_fails_attribution() -> None:
    layouts = FakeLayouts(layout())
    layouts.failing = True
    result = await ActivityEnvironment().run(activity_for(layouts).attribute, attribute_input(ecc_anomaly()))
    assert result.attribution.category is Category.GPU_HARDWARE and result.attribution.culprit_nodes == ()
