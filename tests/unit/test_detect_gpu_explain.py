"""Straggler and hang anomalies explained by the GPUs of the nodes Slurm placed the job on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_explain import explain, explain_straggler
from goodput.detect.gpu_feed import FeedGpu
from goodput.detect.gpu_hang import Report
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category

pytestmark = pytest.mark.timeout(30)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
NODES = ("node1", "node2", "node3", "node4")


def anomaly(kind: AnomalyKind, nodes: tuple[str, ...] = ()) -> Anomaly:
    return Anomaly(id="log-x", source=AnomalySource.LOG, kind=kind, job_id="42", nodes=nodes,
                   evidence=["rank 5 is 25% slower"], category=Category.STRAGGLER if kind is AnomalyKind.STRAGGLER
                   else Category.HANG, observed_at=NOW, detected_at=NOW)


def fleet(slow: tuple[str, int] | None = None, **slow_fields: object) -> list[GpuSample]:
    out = []
    for node in NODES:
        for i in range(8):
            fields: dict[str, object] = {"sm_clock_mhz": 1980.0 - i, "max_sm_clock_mhz": 1980.0,
                                         "power_w": 690.0, "temperature_c": 60.0,
                                         "clock_event_mask": 0, "utilisation_pct": 98.0,
                                         "memory_utilisation_pct": 40.0}
            if (node, i) == slow:
                fields.update(slow_fields)
            # As the service holds them: through the wire model, the reasons decoded from the mask.
            out.append(FeedGpu.model_validate({"index": i, "uuid": f"GPU-{node}-{i}", **fields}).sample(node, NOW))
    return out


def windows(*reports: list[GpuSample]) -> dict[str, list[Report]]:
    out: dict[str, list[Report]] = {}
    for r, samples in enumerate(reports):
        at = NOW - timedelta(seconds=10 * (len(reports) - 1 - r))
        for node in NODES:
            out.setdefault(node, []).append((at, [s for s in samples if s.node == node]))
    return out


def test_the_stragglers_node_gets_its_gpu_and_the_reason() -> None:
    hot = fleet(("node3", 5), sm_clock_mhz=1400.0, temperature_c=91.0, clock_event_mask=0x40)
    found = explain(anomaly(AnomalyKind.STRAGGLER, ("node3",)), NODES, windows(fleet(), hot), NOW)
    assert found.id == "log-x" and found.kind is AnomalyKind.STRAGGLER and found.nodes == ("node3",)
    assert found.gpus == ("GPU-node3-5",)
    text = "\n".join(found.evidence)
    assert "node3/gpu5" in text and "sm clock 1400 MHz" in text and "hw-thermal-slowdown" in text
    assert "temperature 91" in text and "1400 MHz of its maximum 1980 MHz (29% below)" in text


def test_a_node_whose_gpus_look_healthy_points_at_the_host() -> None:
    found = explain_straggler(anomaly(AnomalyKind.STRAGGLER, ("node2",)), NODES, fleet())
    assert found.gpus == () and "the cause may be the host" in found.evidence[-1]


def test_a_report_without_a_node_is_placed_only_where_one_node_stands_out() -> None:
    slow = fleet(("node4", 1), sm_clock_mhz=1300.0, power_w=350.0)
    found = explain_straggler(anomaly(AnomalyKind.STRAGGLER), NODES, slow)
    assert found.nodes == ("node4",) and found.gpus == ("GPU-node4-1",)
    assert "from GPU evidence" in found.evidence[1]
    assert explain_straggler(anomaly(AnomalyKind.STRAGGLER), NODES, fleet()) == anomaly(AnomalyKind.STRAGGLER)


def test_only_the_jobs_nodes_by_slurm_count() -> None:
    """A node the log names but Slurm did not place the job on gets nothing; other jobs' GPUs are no peers."""
    slow = fleet(("node3", 5), sm_clock_mhz=1300.0)
    assert explain_straggler(anomaly(AnomalyKind.STRAGGLER), ("node1", "node2"), slow) == anomaly(
        AnomalyKind.STRAGGLER)
    named = explain_straggler(anomaly(AnomalyKind.STRAGGLER, ("node3",)), ("node1", "node2"), slow)
    assert named == anomaly(AnomalyKind.STRAGGLER, ("node3",))


def test_growing_link_errors_explain_a_straggler() -> None:
    before = fleet(("node1", 2), pcie_replay_count=10, nvlink_error_count=0)
    before = [s.model_copy(update={"pcie_replay_count": s.pcie_replay_count or 0}) for s in before]
    after = [s.model_copy(update={"pcie_replay_count": 250 if (s.node, s.index) == ("node1", 2)
                                  else s.pcie_replay_count}) for s in before]
    found = explain(anomaly(AnomalyKind.STRAGGLER, ("node1",)), NODES, windows(before, after), NOW)
    assert "PCIe replays +240" in "\n".join(found.evidence) and found.gpus == ("GPU-node1-2",)


def test_a_hang_names_the_rank_that_left_the_collective() -> None:
    pinned = [s.model_copy(update={"utilisation_pct": 100.0, "memory_utilisation_pct": 0.0}) for s in fleet()]
    dead = [s.model_copy(update={"utilisation_pct": 0.0}) if (s.node, s.index) == ("node2", 6) else s
            for s in pinned]
    found = explain(anomaly(AnomalyKind.HANG), NODES, windows(fleet(), fleet(), fleet(), dead, dead, dead), NOW)
    assert found.kind is AnomalyKind.HANG and found.nodes == ("node2",) and found.gpus == ("GPU-node2-6",)
    assert "node2/gpu6" in found.evidence[1] and "dropped out of the collective" in found.evidence[1]
    hung = explain(anomaly(AnomalyKind.HANG), NODES, windows(fleet(), pinned, pinned, pinned), NOW)
    assert hung.nodes == () and "hung collective" in hung.evidence[-1]
    busy = explain(anomaly(AnomalyKind.HANG), NODES, windows(fleet(), fleet(), fleet()), NOW)
    assert busy == anomaly(AnomalyKind.HANG)


def test_other_anomalies_pass_unchanged() -> None:
    crash = anomaly(AnomalyKind.CRASH)
    assert explain(crash, NODES, windows(fleet()), NOW) is crash


def test_a_hang_says_which_of_the_jobs_nodes_sent_no_gpus() -> None:
    """A node whose agent fell silent with the job hung is worth a look (it may be the node that is gone)."""
    pinned = [s.model_copy(update={"utilisation_pct": 100.0, "memory_utilisation_pct": 0.0}) for s in fleet()]
    reports = windows(fleet(), pinned, pinned, pinned)
    del reports["node4"]
    found = explain(anomaly(AnomalyKind.HANG), NODES, reports, NOW)
    assert found.nodes == ()
    assert found.evidence[-1] == "no recent GPU reports from node4 (its agent silent or not running)"
