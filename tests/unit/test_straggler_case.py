"""The case for excluding a straggler's node: per-rank step times, the GPUs of every node of the job,
and the step time the job loses per hour (goodput.detect.straggler_case)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput.detect.gpu import GpuSample
from goodput.detect.straggler_case import (
    gpu_evidence,
    lost_seconds_per_hour,
    straggler_anomaly_from_cases,
    straggler_cases,
)
from goodput.models import AnomalyKind, Category
from tests.fakes.gpu import healthy_gpus
from tests.unit.test_detect_straggler import NOW

NODES = ("node1", "node2", "node3", "node4")


def job_gpus(*, per_node: int = 8, **changed: dict[str, object]) -> list[GpuSample]:
    """Every GPU of a four-node job; `changed["node2/gpu5"] = {...}` perturbs one."""
    samples = [s for node in NODES for s in healthy_gpus(node, per_node)]
    return [s.model_copy(update=changed.get(f"{s.node}/gpu{s.index}", {})) for s in samples]


def step_times(ranks: int, *, seed: int, jitter: float = 0.02, slow: dict[int, float] | None = None,
               base: float = 1.0, samples: int = 40) -> dict[int, list[float]]:
    rng = random.Random(seed)
    return {r: [base * (1 + (slow or {}).get(r, 0.0)) * (1 + rng.uniform(-jitter, jitter)) for _ in range(samples)]
            for r in range(ranks)}


def hosts_of(ranks: int, per_node: int = 8) -> dict[int, str]:
    return {r: NODES[min(r // per_node, len(NODES) - 1)] for r in range(ranks)}


def test_lost_time_per_hour_is_the_slowdown_of_an_hours_work() -> None:
    # Ranks at 1.0 s, one at 1.25 s: every step waits for it, an hour's work takes 900 s longer.
    assert lost_seconds_per_hour(1.25, 1.0) == pytest.approx(900.0)
    assert lost_seconds_per_hour(1.0, 1.0) == 0.0
    assert lost_seconds_per_hour(0.9, 1.0) == 0.0
    assert lost_seconds_per_hour(1.0, 0.0) == 0.0


def test_a_slow_rank_names_its_node_its_gpu_and_what_the_job_loses() -> None:
    times = step_times(32, seed=1, slow={13: 0.25})
    gpus = job_gpus(**{"node2/gpu5": {"sm_clock_mhz": 1410.0, "clock_event_reasons": ("hw-thermal-slowdown",),
                                      "temperature_c": 91.0}})
    [case] = straggler_cases(times, hosts_of(32), gpus)
    assert (case.node, case.ranks, case.basis) == ("node2", (13,), "step-times")
    assert case.gpu is not None and case.gpu.startswith("node2/gpu5")
    assert case.lost_s_per_h == pytest.approx(900.0, rel=0.1)
    assert "exclude node2 at the job's next restart" in case.recommendation
    text = "\n".join(case.evidence)
    assert "sm clock 1410 MHz" in text and "hw-thermal-slowdown" in text and "91" in text


def test_a_slow_rank_whose_gpus_look_healthy_is_named_and_says_the_cause_is_elsewhere() -> None:
    [case] = straggler_cases(step_times(32, seed=2, slow={30: 0.3}), hosts_of(32), job_gpus())
    assert case.node == "node4" and case.gpu is None
    assert any("no GPU of node4" in line for line in case.evidence)


def test_error_counters_count_only_when_they_grow_against_the_fleet() -> None:
    before = job_gpus(**{"node3/gpu2": {"pcie_replay_count": 40, "nvlink_error_count": 7}})
    same = job_gpus(**{"node3/gpu2": {"pcie_replay_count": 40, "nvlink_error_count": 7}})
    assert gpu_evidence(same, before) == []  # old errors: not today's cause
    grown = job_gpus(**{"node3/gpu2": {"pcie_replay_count": 95, "nvlink_error_count": 19}})
    [evidence] = gpu_evidence(grown, before)
    assert evidence.node == "node3" and evidence.gpu_index == 2
    assert any("PCIe replays +55" in s for s in evidence.signals)
    assert any("NVLink errors +12" in s for s in evidence.signals)


def test_errors_every_gpu_counts_at_once_are_the_fabric_not_one_gpu() -> None:
    before = job_gpus()
    everywhere = job_gpus(**{f"{n}/gpu{i}": {"nvlink_error_count": 3 + i} for n in NODES for i in range(8)})
    assert gpu_evidence(everywhere, before) == []


def test_a_throttle_every_gpu_shares_is_not_one_gpus_fault() -> None:
    hot_room = job_gpus(**{f"{n}/gpu{i}": {"clock_event_reasons": ("sw-thermal-slowdown",)}
                           for n in NODES for i in range(8)})
    assert gpu_evidence(hot_room) == []


def test_without_per_rank_times_two_gpu_signals_name_the_node_as_an_estimate() -> None:
    gpus = job_gpus(**{"node1/gpu0": {"sm_clock_mhz": 1485.0, "clock_event_reasons": ("hw-slowdown",)}})
    [case] = straggler_cases({}, {}, gpus)
    assert (case.node, case.basis) == ("node1", "gpu")
    assert case.lost_s_per_h == pytest.approx((1980 / 1485 - 1) * 3600, rel=0.01)
    assert "estimate" in " ".join(case.evidence)
    one_signal = job_gpus(**{"node1/gpu0": {"temperature_c": 88.0}})
    assert straggler_cases({}, {}, one_signal) == []


def test_balanced_step_times_outweigh_a_gpu_hint() -> None:
    # The job's own ranks keep pace: whatever a GPU shows, it costs this job nothing.
    gpus = job_gpus(**{"node1/gpu0": {"sm_clock_mhz": 1485.0, "clock_event_reasons": ("hw-slowdown",)}})
    assert straggler_cases(step_times(32, seed=3), hosts_of(32), gpus) == []


def test_an_unplaced_rank_takes_the_node_the_gpus_single_out() -> None:
    gpus = job_gpus(**{"node3/gpu1": {"power_w": 310.0, "sm_clock_mhz": 1300.0}})
    [case] = straggler_cases(step_times(32, seed=4, slow={9: 0.2}), {}, gpus)
    assert case.node == "node3" and case.ranks == (9,)
    assert any("from GPU evidence" in line for line in case.evidence)


def test_the_anomaly_carries_node_gpu_ranks_and_the_case() -> None:
    gpus = job_gpus(**{"node2/gpu5": {"sm_clock_mhz": 1410.0, "clock_event_reasons": ("hw-slowdown",)}})
    cases = straggler_cases(step_times(32, seed=5, slow={13: 0.25}), hosts_of(32), gpus)
    anomaly = straggler_anomaly_from_cases(cases, anomaly_id="s1", job_id="42", observed_at=NOW, detected_at=NOW)
    assert anomaly is not None
    assert anomaly.kind is AnomalyKind.STRAGGLER and anomaly.category is Category.STRAGGLER
    assert anomaly.nodes == ("node2",) and anomaly.ranks == (13,) and anomaly.gpus == ("GPU-node2-0005",)
    assert "s of step time per hour" in anomaly.evidence[0]
    assert straggler_anomaly_from_cases([], anomaly_id="s2", job_id="42", observed_at=NOW, detected_at=NOW) is None


# -- properties: generated per-rank data ---------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(ranks=st.integers(4, 64), seed=st.integers(0, 2**32 - 1), jitter=st.floats(0.0, 0.03),
       base=st.floats(0.05, 30.0), samples=st.integers(5, 60))
def test_a_balanced_job_never_raises_a_case(ranks: int, seed: int, jitter: float, base: float,
                                            samples: int) -> None:
    times = step_times(ranks, seed=seed, jitter=jitter, base=base, samples=samples)
    assert straggler_cases(times, hosts_of(ranks, per_node=max(1, ranks // 4)), job_gpus()) == []


@SETTINGS
@given(ranks=st.integers(4, 64), seed=st.integers(0, 2**32 - 1), jitter=st.floats(0.0, 0.02),
       slowdown=st.floats(0.15, 3.0), base=st.floats(0.05, 30.0), data=st.data())
def test_a_rank_slowed_by_fifteen_percent_or_more_is_always_named(ranks: int, seed: int, jitter: float,
                                                                   slowdown: float, base: float,
                                                                   data: st.DataObject) -> None:
    slow = data.draw(st.integers(0, ranks - 1))
    per_node = max(1, ranks // 4)
    times = step_times(ranks, seed=seed, jitter=jitter, base=base, slow={slow: slowdown})
    cases = straggler_cases(times, hosts_of(ranks, per_node), job_gpus())
    assert [(c.ranks, c.node) for c in cases] == [((slow,), hosts_of(ranks, per_node)[slow])]
    assert cases[0].lost_s_per_h == pytest.approx(slowdown * 3600, rel=0.1)
