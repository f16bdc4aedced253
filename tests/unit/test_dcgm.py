"""The Prometheus text parser and the DCGM field mapping, on a recorded-style 8-GPU page."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.dcgm import ExpositionError, parse_dcgm_metrics, parse_exposition
from goodput.detect.gpu import GpuRecoveryAction, Severity
from goodput.detect.gpu_rules import evaluate
from goodput.models import Category

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "gpu-node17.metrics"
NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def page() -> str:
    return FIXTURE.read_text()


def test_every_line_of_the_page_parses(page: str) -> None:
    metrics = parse_exposition(page)
    sample_lines = [line for line in page.splitlines() if line and not line.startswith("#")]
    assert len(metrics) == len(sample_lines)
    stamped = [m for m in metrics if m.timestamp_ms is not None]
    assert [(m.name, m.value, m.timestamp_ms) for m in stamped] == [
        ("dcgm_exporter_last_scrape_duration_seconds", 0.0213, 1795860721302)]
    buckets = {m.labels["le"]: m.value for m in metrics if m.name == "scrape_latency_seconds_bucket"}
    assert buckets == {"0.1": 18200.0, "+Inf": 18211.0}
    assert [m.value for m in metrics if m.name == "scrape_latency_seconds_sum"] == [math.inf]


def test_eight_gpus_with_every_field(page: str) -> None:
    samples = parse_dcgm_metrics(page, observed_at=NOW)
    assert [s.index for s in samples] == list(range(8))
    s = samples[0]
    assert s.uuid == "GPU-5c8e2b71-2f0a-4be4-9c1e-7d0f3a6b9e10" and s.pci_bus_id == "0000:18:00.0"
    assert (s.name, s.node, s.job_ids, s.observed_at) == ("NVIDIA H200", "gpu-node17", ("4242",), NOW)
    assert (s.utilisation_pct, s.memory_utilisation_pct, s.sm_clock_mhz, s.power_w) == (97, 38, 1980, 688.5)
    assert (s.temperature_c, s.ecc_volatile_uncorrected, s.row_remap_failure) == (51, 0, False)
    assert s.clock_event_reasons == () and s.last_xid == 0 and s.xid_events == ()
    assert samples[1].ecc_aggregate_corrected == 3
    assert [x.pcie_replay_count for x in samples] == [0] * 8  # the straggler case compares their growth


def test_the_failed_gpu(page: str) -> None:
    bad = parse_dcgm_metrics(page, observed_at=NOW)[5]
    assert (bad.ecc_volatile_uncorrected, bad.ecc_aggregate_uncorrected, bad.ecc_volatile_corrected) == (2, 2, 14)
    assert bad.remapped_rows_uncorrectable == 1 and bad.row_remap_pending
    assert bad.power_w is None and bad.temperature_c is None  # NaN: DCGM could not read them
    assert bad.last_xid == 79
    [xid] = bad.xid_events
    assert (xid.code, xid.gpu_index, xid.uuid, xid.pci_bus_id, xid.node, xid.source) == (
        79, 5, bad.uuid, "0000:ab:00.0", "gpu-node17", "dcgm")
    assert xid.message == 'GPU has fallen off the bus "PCI:0000:ab:00" \\ see dmesg'  # unescaped


def test_rules_on_the_page(page: str) -> None:
    findings = evaluate(parse_dcgm_metrics(page, observed_at=NOW))
    by_gpu = {(f.gpu_index, f.rule): f for f in findings}
    assert set(by_gpu) == {(5, "xid-79"), (5, "ecc-uncorrectable"), (5, "row-remap-pending"),
                           (5, "idle-among-busy"), (3, "clock-slowdown"), (3, "low-outlier")}
    assert by_gpu[5, "xid-79"].severity is Severity.CRITICAL
    assert by_gpu[5, "xid-79"].category is Category.GPU_HARDWARE
    assert by_gpu[3, "low-outlier"].category is Category.STRAGGLER


def test_labels_escapes_and_odd_but_legal_spacing() -> None:
    text = ('# a free comment\n'
            'm{a="x\\"y",b="back\\\\slash",c="new\\nline",d="",e="not\\tescape",} 1\n'
            'm2 { a = "1" , b="2" } -3.5e2\n'
            'm3{} NaN\n'
            'm4 +Inf 1700000000000\n'
            'm5 -Inf\n'
            '\n   \n')
    m, m2, m3, m4, m5 = parse_exposition(text)
    assert m.labels == {"a": 'x"y', "b": "back\\slash", "c": "new\nline", "d": "", "e": "not\\tescape"}
    assert (m2.labels, m2.value) == ({"a": "1", "b": "2"}, -350.0)
    assert m3.labels == {} and math.isnan(m3.value)
    assert (m4.value, m4.timestamp_ms) == (math.inf, 1700000000000)
    assert m5.value == -math.inf


@pytest.mark.parametrize(("text", "line_no"), [
    ("<!DOCTYPE html>\n<html><body>Login</body></html>\n", 1),
    ("ok 1\nhello world\n", 2),
    ('m{a="unterminated} 1\n', 1),
    ('m{a=unquoted} 1\n', 1),
    ('m{a="1" b="2"} 1\n', 1),
    ('m{a="1",a="2"} 1\n', 1),
    ('m{1a="x"} 1\n', 1),
    ("m\n", 1),
    ("m 1 2 3\n", 1),
    ("m 1 notatime\n", 1),
    ("m 1_000\n", 1),
    ('m{a="1"}2\n', 1),
    ("\x00\x01\x02 binary\n", 1),
])
def test_garbage_is_a_clear_error_with_a_line_number(text: str, line_no: int) -> None:
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(text)
    assert caught.value.line_no == line_no
    assert str(caught.value).startswith(f"line {line_no}: ")


def test_non_dcgm_or_unidentified_series_are_ignored() -> None:
    text = ('node_load1 0.5\n'
            'DCGM_FI_DEV_GPU_UTIL{Hostname="n1"} 50\n'  # no gpu, UUID or pci_bus_id: whose?
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 51\n')
    [s] = parse_dcgm_metrics(text)
    assert (s.uuid, s.utilisation_pct, s.node) == ("GPU-a", 51.0, "n1")
    assert parse_dcgm_metrics("") == []


def test_one_series_per_job_on_a_shared_gpu() -> None:
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",hpc_job="11"} 50\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",hpc_job="12"} 50\n'
            'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",Hostname="n1",hpc_job="11"} 1980\n')
    [s] = parse_dcgm_metrics(text, node="gpu-node17")
    assert s.job_ids == ("11", "12") and s.node == "gpu-node17"


def test_newer_exporter_field_names() -> None:
    text = ('DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="2",UUID="GPU-c"} 64\n'
            'DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION{gpu="2",UUID="GPU-c"} 2\n'
            'DCGM_FI_DEV_RETIRED_PENDING{gpu="2",UUID="GPU-c"} 1\n'
            'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="2",UUID="GPU-c"} 1\n')
    [s] = parse_dcgm_metrics(text)
    assert s.clock_event_reasons == ("hw-thermal-slowdown",)
    assert s.recovery_action is GpuRecoveryAction.NODE_REBOOT
    assert s.retired_pages_pending and s.row_remap_failure
    assert {f.rule for f in evaluate([s])} == {"clock-slowdown", "recovery-action", "row-remap-failure",
                                                "page-retirement-pending"}


def test_values_a_field_cannot_hold_are_errors_not_exceptions() -> None:
    """Before: Xid -1 raised pydantic's ValidationError and a 5000-digit timestamp a ValueError."""
    gpu = 'gpu="0",UUID="GPU-1",Hostname="n1"'
    text = (f'DCGM_FI_DEV_XID_ERRORS{{{gpu}}} -1\n'
            f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{gpu}}} 1e300\n'
            f'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{gpu}}} -5\n'
            f'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{gpu}}} 1e20\n'
            f'DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION{{{gpu}}} 1e30\n'
            f'DCGM_FI_DEV_GPU_TEMP{{{gpu}}} 51\n'
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{"9" * 5000}",UUID="GPU-2"}} 5\n')
    samples = {s.uuid: s for s in parse_dcgm_metrics(text)}
    first, second = samples["GPU-1"], samples["GPU-2"]
    assert (first.last_xid, first.ecc_volatile_uncorrected, first.ecc_volatile_corrected) == (None, None, None)
    assert (first.clock_event_mask, first.recovery_action) == (None, None)
    assert (first.temperature_c, first.xid_events) == (51, ())
    assert len(first.errors) == 4 and any("last_xid: -1 is not an Xid code" in e for e in first.errors)
    assert second.index is None and second.utilisation_pct == 5


@pytest.mark.parametrize("stamp", ["9" * 5000, "1" * 19, "-" + "9" * 19, "٣"])
def test_an_absurd_timestamp_is_an_exposition_error(stamp: str) -> None:
    with pytest.raises(ExpositionError, match="line 1: bad value or timestamp"):
        parse_exposition(f"m 1 {stamp}\n")
    assert parse_exposition("m 1 -1700000000000\n")[0].timestamp_ms == -1700000000000


def test_long_label_values_are_clipped() -> None:
    text = f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{"u" * 5000}",hpc_job="{"7" * 5000}",err_msg="{"e" * 9000}"}} 79\n'
    [sample] = parse_dcgm_metrics(text)
    assert sample.uuid is not None and len(sample.uuid) == 256 and len(sample.job_ids[0]) == 256
    assert len(sample.xid_events[0].message) <= 1024


def test_the_max_sm_clock_is_read_for_the_gpu_feed() -> None:
    text = ('DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a"} 1410\n'
            'DCGM_FI_DEV_MAX_SM_CLOCK{gpu="0",UUID="GPU-a"} 1980\n')
    [s] = parse_dcgm_metrics(text)
    assert (s.sm_clock_mhz, s.max_sm_clock_mhz) == (1410.0, 1980.0)
