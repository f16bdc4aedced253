"""The agents' GPU feed: the wire model refuses what a hostile node could send, the store stays bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_feed import MAX_GPUS, FeedGpu, GpuReport, GpuSampleStore

pytestmark = pytest.mark.timeout(30)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def gpu(index: int, node: str = "node1", **fields: object) -> GpuSample:
    return GpuSample.model_validate({"index": index, "uuid": f"GPU-{node}-{index}", "node": node,
                                     "utilisation_pct": 97.0, "sm_clock_mhz": 1980.0, **fields})


def test_a_report_carries_what_the_comparisons_use_and_the_node_is_the_services() -> None:
    sample = gpu(3, sm_clock_mhz=1400.0, max_sm_clock_mhz=1980.0, memory_utilisation_pct=41.0, power_w=650.5,
                 temperature_c=88.0, clock_event_mask=0x40 | 0x4, pcie_replay_count=7, nvlink_error_count=2,
                 pci_bus_id="00000000:3B:00.0", job_ids=("42",), ecc_volatile_uncorrected=1)
    report = GpuReport.model_validate_json(GpuReport.of("c1", "node1", [sample]).model_dump_json())
    back = report.gpus[0].sample("node9", NOW)
    assert back.node == "node9" and back.observed_at == NOW and back.pci_bus_id == "0000:3b:00.0"
    assert (back.sm_clock_mhz, back.max_sm_clock_mhz, back.memory_utilisation_pct, back.power_w) == (
        1400.0, 1980.0, 41.0, 650.5)
    assert back.clock_event_reasons == ("sw-power-cap", "hw-thermal-slowdown")
    assert (back.pcie_replay_count, back.nvlink_error_count) == (7, 2)
    assert back.ecc_volatile_uncorrected is None and back.job_ids == ()  # not part of the feed


def test_an_odd_reading_is_sent_as_unknown_not_the_whole_report_lost() -> None:
    odd = gpu(0, temperature_c=float("nan"), power_w=1e9, uuid="GPU-bad uuid;")
    sent = FeedGpu.of(odd)
    assert sent.temperature_c is None and sent.power_w is None and sent.uuid is None
    assert sent.utilisation_pct == 97.0 and sent.index == 0


@pytest.mark.parametrize("body", [
    {"cluster": "c1", "node": "node1", "gpus": [{"utilisation_pct": 101}]},
    {"cluster": "c1", "node": "node1", "gpus": [{"utilisation_pct": "NaN"}]},
    {"cluster": "c1", "node": "node1", "gpus": [{"sm_clock_mhz": float("inf")}]},
    {"cluster": "c1", "node": "node1", "gpus": [{"pcie_replay_count": -1}]},
    {"cluster": "c1", "node": "node1", "gpus": [{"clock_event_reasons": ["hw-slowdown"]}]},
    {"cluster": "c1", "node": "node1", "gpus": [{"uuid": "GPU-1\n"}]},
    {"cluster": "c1", "node": "node1", "gpus": [{}] * (MAX_GPUS + 1)},
    {"cluster": "c1", "node": "node1", "gpus": [], "job": "42"},
    {"cluster": "c1", "gpus": []},
])
def test_hostile_reports_are_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        GpuReport.model_validate(body)


def test_node_names_are_checked_like_everywhere_else() -> None:
    with pytest.raises(ValueError):
        GpuReport(cluster="c1", node="node1; rm -rf /", gpus=()).checked_node()
    assert GpuReport(cluster="c1", node="node1", gpus=()).checked_node() == "node1"


def test_the_store_keeps_a_window_per_node_and_forgets_the_old() -> None:
    store = GpuSampleStore(window=3, max_age_s=60, max_nodes=10)
    for i in range(5):
        assert store.put("node1", NOW + timedelta(seconds=10 * i), [gpu(0, utilisation_pct=float(i))])
    reports = store.reports("node1", NOW + timedelta(seconds=40))
    assert [r[1][0].utilisation_pct for r in reports] == [2.0, 3.0, 4.0]
    latest, oldest = store.latest_and_oldest(["node1", "node2"], NOW + timedelta(seconds=40))
    assert [s.utilisation_pct for s in latest] == [4.0] and [s.utilisation_pct for s in oldest] == [2.0]
    assert store.reports("node1", NOW + timedelta(seconds=95)) == [(NOW + timedelta(seconds=40), reports[-1][1])]
    assert store.reports("node1", NOW + timedelta(seconds=101)) == []
    store.expire(NOW + timedelta(seconds=101))
    assert len(store) == 0


def test_the_store_is_bounded_in_nodes_and_gpus() -> None:
    store = GpuSampleStore(window=2, max_age_s=60, max_nodes=2)
    assert store.put("node1", NOW, [gpu(i) for i in range(MAX_GPUS + 10)])
    assert len(store.reports("node1", NOW)[0][1]) == MAX_GPUS
    assert store.put("node2", NOW, [gpu(0, "node2")])
    assert not store.put("node3", NOW, [gpu(0, "node3")])  # full of nodes heard within max_age_s
    assert store.put("node1", NOW + timedelta(seconds=30), [gpu(0)])  # a known node still reports
    # node2 falls silent past max_age_s: its place goes to a new node.
    assert store.put("node3", NOW + timedelta(seconds=61), [gpu(0, "node3")])
    assert len(store) == 2 and store.reports("node2", NOW + timedelta(seconds=61)) == []


def test_a_store_needs_sane_bounds() -> None:
    with pytest.raises(ValueError):
        GpuSampleStore(window=1, max_age_s=60, max_nodes=1)
