"""GPU models, the pure rules that turn samples into findings, and the fake probe."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from goodput.detect.gpu import (
    GpuProbe,
    GpuRecoveryAction,
    GpuSample,
    Severity,
    XidEvent,
    decode_clock_event_reasons,
    normalize_pci_bus_id,
)
from goodput.detect.gpu_rules import (
    evaluate,
    idle_gpu_findings,
    robust_low_outliers,
    sample_findings,
    straggler_findings,
    xid_finding,
)
from goodput.models import AnomalyKind, AnomalySource, Category
from tests.fakes.gpu import FakeGpuProbe, healthy_gpus

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)


def gpu(index: int = 0, **fields: Any) -> GpuSample:
    return GpuSample.model_validate({"index": index, "uuid": f"GPU-{index}", "node": "node1", **fields})


@pytest.mark.parametrize(("raw", "expected"), [
    ("00000000:3B:00.0", "0000:3b:00.0"), ("PCI:0000:3b:00", "0000:3b:00.0"), ("0000:3b:00.0", "0000:3b:00.0"),
    ("3b:00.0", "0000:3b:00.0"), ("00000001:DB:1F.3", "0001:db:1f.3"), (" weird ", "weird"),
])
def test_pci_bus_ids_meet_on_one_spelling(raw: str, expected: str) -> None:
    assert normalize_pci_bus_id(raw) == expected


def test_clock_reasons_and_recovery_actions_decode() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1 | 0x40) == ("gpu-idle", "hw-thermal-slowdown")
    assert decode_clock_event_reasons(0x8 | 0x10000) == ("hw-slowdown", "unknown-0x10000")
    assert GpuRecoveryAction.from_code(0) is GpuRecoveryAction.NONE
    assert GpuRecoveryAction.from_code(7) is GpuRecoveryAction.SYSTEM_REBOOT
    assert GpuRecoveryAction.from_code(99) is None


def test_healthy_gpus_yield_nothing() -> None:
    assert evaluate(healthy_gpus("node1")) == []
    assert evaluate([gpu(i) for i in range(8)]) == []  # nothing measured: nothing to say


def test_volatile_uncorrectable_ecc_is_a_critical_hardware_fault() -> None:
    [finding] = sample_findings(gpu(ecc_volatile_uncorrected=3))
    assert (finding.rule, finding.kind, finding.category, finding.severity) == (
        "ecc-uncorrectable", AnomalyKind.GPU_FAULT, Category.GPU_HARDWARE, Severity.CRITICAL)
    assert finding.evidence == ("node1/gpu0 (GPU-0): 3 uncorrectable ECC errors since driver load",)


def test_aggregate_ecc_counts_only_when_it_grows() -> None:
    old = gpu(ecc_aggregate_uncorrected=1, ecc_volatile_uncorrected=0)
    assert sample_findings(old) == []  # a DBE from long ago is history, not today's culprit
    assert sample_findings(old, previous=old) == []
    [grew] = sample_findings(gpu(ecc_aggregate_uncorrected=2), previous=old)
    assert grew.rule == "ecc-uncorrectable" and "1 → 2" in grew.evidence[0]


@pytest.mark.parametrize(("fields", "rule", "category", "severity"), [
    ({"row_remap_failure": True}, "row-remap-failure", Category.GPU_HARDWARE, Severity.CRITICAL),
    ({"row_remap_pending": True}, "row-remap-pending", Category.GPU_HARDWARE, Severity.WARNING),
    ({"retired_pages_pending": True}, "page-retirement-pending", Category.GPU_HARDWARE, Severity.WARNING),
    ({"recovery_action": "gpu-reset"}, "recovery-action", Category.GPU_HARDWARE, Severity.CRITICAL),
    ({"recovery_action": "node-reboot"}, "recovery-action", Category.GPU_HARDWARE, Severity.CRITICAL),
    ({"recovery_action": "drain-p2p"}, "recovery-action", Category.NVLINK, Severity.CRITICAL),
    ({"clock_event_reasons": ("hw-power-brake-slowdown",)}, "clock-slowdown", Category.STRAGGLER,
     Severity.WARNING),
    ({"gpu_lost": True}, "gpu-lost", Category.GPU_HARDWARE, Severity.CRITICAL),
    ({"gpu_reset_required": True}, "reset-required", Category.GPU_HARDWARE, Severity.CRITICAL),
])
def test_single_gpu_rules(fields: dict[str, Any], rule: str, category: Category, severity: Severity) -> None:
    [finding] = sample_findings(gpu(**fields))
    assert (finding.rule, finding.category, finding.severity) == (rule, category, severity)


def test_benign_states_are_quiet() -> None:
    quiet = gpu(recovery_action="none", clock_event_reasons=("gpu-idle", "sw-power-cap", "sync-boost"),
                row_remap_pending=False, ecc_volatile_corrected=1000)
    assert sample_findings(quiet) == []


@pytest.mark.parametrize(("code", "category", "kind", "severity"), [
    (79, Category.GPU_HARDWARE, AnomalyKind.GPU_FAULT, Severity.CRITICAL),
    (48, Category.GPU_HARDWARE, AnomalyKind.GPU_FAULT, Severity.CRITICAL),
    (74, Category.NVLINK, AnomalyKind.GPU_FAULT, Severity.CRITICAL),
    (13, Category.APP_ERROR, AnomalyKind.CRASH, Severity.WARNING),
    (31, Category.APP_ERROR, AnomalyKind.CRASH, Severity.WARNING),
    (999, Category.UNKNOWN, AnomalyKind.CRASH, Severity.WARNING),
])
def test_xid_catalogue(code: int, category: Category, kind: AnomalyKind, severity: Severity) -> None:
    finding = xid_finding(XidEvent(code=code, pci_bus_id="0000:3b:00.0", node="node1", message="m"))
    assert (finding.category, finding.kind, finding.severity, finding.xid) == (category, kind, severity, code)
    assert finding.rule == f"xid-{code}" and finding.gpu_ref == "0000:3b:00.0"
    assert finding.signature_ids == (f"xid-{code}",)  # the signature catalogue's restart/drain verdict
    assert finding.actionable is (severity is Severity.CRITICAL)


def test_one_idle_gpu_among_busy_peers_is_a_hang_hint() -> None:
    samples = healthy_gpus("node1")
    samples[6] = samples[6].model_copy(update={"utilisation_pct": 0.0})
    [finding] = idle_gpu_findings(samples)
    assert (finding.gpu_index, finding.kind, finding.category) == (6, AnomalyKind.HANG, Category.HANG)
    assert "utilisation 0% while the median of its 7 peers is 97%" in finding.evidence[0]


def test_a_whole_job_idling_together_is_not_a_hang_hint() -> None:
    assert idle_gpu_findings(healthy_gpus("node1", utilisation=0.0)) == []  # checkpointing, evaluation
    two = healthy_gpus("node1", count=2)
    assert idle_gpu_findings([two[0], two[1].model_copy(update={"utilisation_pct": 0.0})]) == []
    unknown = healthy_gpus("node1", count=4)
    unknown[0] = unknown[0].model_copy(update={"utilisation_pct": None})
    assert idle_gpu_findings(unknown) == []


def test_robust_outliers_by_median_and_mad() -> None:
    assert robust_low_outliers([1980, 1980, 1980, 1410, 1980]) == [3]  # MAD 0: the drop decides
    assert robust_low_outliers([1980, 1965, 1972, 1950, 1985]) == []  # ordinary jitter
    assert robust_low_outliers([1980, 1990, 1700, 1960, 1985, 1400]) == [5]
    assert robust_low_outliers([1000, 500]) == []  # two GPUs: nobody is an outlier
    assert robust_low_outliers([2500, 2000, 2000, 2000]) == []  # only slow ones count


def test_straggler_by_clock_or_by_power_once_per_gpu() -> None:
    samples = healthy_gpus("node1")
    samples[2] = samples[2].model_copy(update={"sm_clock_mhz": 1100.0, "power_w": 300.0})
    samples[4] = samples[4].model_copy(update={"sm_clock_mhz": None, "power_w": 350.0})
    findings = straggler_findings(samples)
    assert sorted(f.gpu_index for f in findings if f.gpu_index is not None) == [2, 4]
    assert all(f.kind is AnomalyKind.STRAGGLER and f.category is Category.STRAGGLER for f in findings)


def test_kernel_xids_are_matched_to_samples_on_the_same_node_only() -> None:
    samples = healthy_gpus("node1", count=4) + healthy_gpus("node2", count=4)
    by_pci = XidEvent(code=79, pci_bus_id="PCI:0000:38:00", node="node2", source="kmsg")
    by_uuid = XidEvent(code=48, uuid="GPU-node1-0003")
    by_index = XidEvent(code=74, gpu_index=1, node="node1")
    findings = evaluate(samples, xid_events=[by_pci, by_uuid, by_index])
    assert [(f.node, f.gpu_index, f.uuid) for f in findings] == [
        ("node2", 2, "GPU-node2-0002"), ("node1", 3, "GPU-node1-0003"), ("node1", 1, "GPU-node1-0001")]


def test_findings_become_anomalies_with_stable_ids() -> None:
    [finding] = sample_findings(gpu(3, row_remap_failure=True))
    kwargs = {"job_id": "1001", "observed_at": NOW, "detected_at": NOW, "cluster": "lab", "job_attempt": 2}
    anomaly = finding.to_anomaly(**kwargs, ranks=(3,))  # type: ignore[arg-type]
    assert re.fullmatch(r"[A-Za-z0-9._:\-]+", anomaly.id) and anomaly.id.startswith("gpu:row-remap-failure:")
    assert anomaly.id == finding.to_anomaly(**kwargs).id  # type: ignore[arg-type]
    assert (anomaly.source, anomaly.kind, anomaly.category) == (
        AnomalySource.GPU, AnomalyKind.GPU_FAULT, Category.GPU_HARDWARE)
    assert anomaly.nodes == ("node1",) and anomaly.gpus == ("GPU-3",) and anomaly.ranks == (3,)
    assert anomaly.incident_key.job_attempt == 2 and anomaly.evidence == list(finding.evidence)
    assert anomaly.signature_ids == ()
    other_attempt = finding.to_anomaly(**{**kwargs, "job_attempt": 3})  # type: ignore[arg-type]
    assert other_attempt.id != anomaly.id


def test_samples_round_trip_as_json() -> None:
    sample = healthy_gpus("node1")[0].model_copy(update={
        "recovery_action": GpuRecoveryAction.DRAIN_AND_RESET, "observed_at": NOW,
        "xid_events": (XidEvent(code=79, gpu_index=0, observed_at=NOW),)})
    assert GpuSample.model_validate_json(sample.model_dump_json()) == sample


async def test_fake_probe_scripts_samples_and_hands_out_xids_once() -> None:
    broken = healthy_gpus("node1")
    broken[5] = broken[5].model_copy(update={"ecc_volatile_uncorrected": 2})
    probe = FakeGpuProbe([healthy_gpus("node1"), broken])
    assert isinstance(probe, GpuProbe)
    assert evaluate(await probe.sample()) == []
    assert [f.gpu_index for f in evaluate(await probe.sample())] == [5]
    assert [f.gpu_index for f in evaluate(await probe.sample())] == [5]  # the last batch repeats
    probe.set_samples([])
    assert await probe.sample() == [] and probe.sample_calls == 4
    assert await probe.poll_xid_events(0) == []
    asyncio.get_running_loop().call_later(0.01, probe.push_xid, XidEvent(code=79, gpu_index=5))
    [event] = await asyncio.wait_for(probe.poll_xid_events(5000), 10)
    assert event.code == 79
    assert await probe.poll_xid_events(10) == []


def test_xid_anomalies_take_the_signature_catalogues_verdict() -> None:
    from goodput.diagnose.attribution import attribute

    def anomaly(code: int) -> Any:
        finding = xid_finding(XidEvent(code=code, gpu_index=0, node="node1"))
        return finding.to_anomaly(job_id="1001", observed_at=NOW, detected_at=NOW)

    fell_off = attribute([anomaly(79)])
    assert (fell_off.category, fell_off.drain) == (Category.GPU_HARDWARE, True)
    assert fell_off.signature_ids == ("xid-79",)
    contained = attribute([anomaly(94)])  # the catalogue: restart, but the GPU stays in service
    assert (contained.category, contained.drain) == (Category.GPU_HARDWARE, False)
    app = attribute([anomaly(13)])
    assert (app.category, app.drain, app.restart) == (Category.APP_ERROR, False, False)
