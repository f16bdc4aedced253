"""GPU evidence on a hang: generated jobs, each shape judged as it must be and no other way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_hang import Report, judge_hang

pytestmark = pytest.mark.timeout(60)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
REPORTS = 6  # one a 10 s, the last three within the 30 s judged


def job(util: dict[tuple[int, int], list[float]], memory: dict[tuple[int, int], list[float]]
        ) -> dict[str, list[Report]]:
    """`util[(node, gpu)]` and `memory[(node, gpu)]`: one value per report, oldest first."""
    nodes = sorted({n for n, _ in util})
    out: dict[str, list[Report]] = {}
    for n in nodes:
        reports: list[Report] = []
        for r in range(REPORTS):
            at = NOW - timedelta(seconds=10 * (REPORTS - 1 - r))
            samples = [GpuSample(node=f"node{n}", index=g, uuid=f"GPU-{n}-{g}", utilisation_pct=util[n, g][r],
                                 memory_utilisation_pct=memory[n, g][r]) for (m, g) in sorted(util) if m == n]
            reports.append((at, samples))
        out[f"node{n}"] = reports
    return out




def values(draw: st.DrawFn, lo: float, hi: float) -> list[float]:
    return [draw(st.floats(lo, hi)) for _ in range(REPORTS)]


@st.composite
def gpus_of(draw: st.DrawFn, util: tuple[float, float], memory: tuple[float, float], min_gpus: int = 2
            ) -> tuple[dict[tuple[int, int], list[float]], dict[tuple[int, int], list[float]]]:
    nodes = draw(st.integers(1, 4))
    per = draw(st.integers(max(1, -(-min_gpus // nodes)), 8))
    keys = [(n, g) for n in range(nodes) for g in range(per)]
    return ({k: values(draw, *util) for k in keys}, {k: values(draw, *memory) for k in keys})


@settings(max_examples=60, deadline=None)
@given(gpus_of(util=(70.0, 100.0), memory=(20.0, 80.0)))
def test_a_balanced_busy_job_is_not_hung(g: tuple[dict[tuple[int, int], list[float]], ...]) -> None:
    assert judge_hang(job(*g), NOW).verdict == "none"


@settings(max_examples=60, deadline=None)
@given(gpus_of(util=(90.0, 100.0), memory=(20.0, 80.0)))
def test_a_compute_bound_job_pinned_at_full_utilisation_is_not_hung(
        g: tuple[dict[tuple[int, int], list[float]], ...]) -> None:
    """A healthy step pins every GPU too; what tells it from a spinning collective is the memory it moves."""
    assert judge_hang(job(*g), NOW).verdict == "none"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([(0.0, 30.0), (0.0, 100.0), (0.0, 5.0)]).flatmap(
    lambda u: gpus_of(util=u, memory=(0.0, 60.0))))
def test_a_job_in_a_slow_phase_is_not_hung(g: tuple[dict[tuple[int, int], list[float]], ...]) -> None:
    """Start-up, checkpoint save, data loading: the GPUs idle or come and go, never all pinned and quiet;
    and an idle job is not one rank out of a collective."""
    util, memory = g
    verdict = judge_hang(job(util, memory), NOW)
    assert verdict.verdict == "none" or (verdict.verdict == "hung-collective" and all(
        min(u[-3:]) >= 90 for u in util.values()) and all(max(m[-3:]) <= 10 for m in memory.values())) or (
        verdict.verdict == "rank-idle" and any(min(u[-3:]) >= 90 for u in util.values()))


@settings(max_examples=60, deadline=None)
@given(gpus_of(util=(92.0, 100.0), memory=(0.0, 8.0)))
def test_every_gpu_pinned_and_quiet_is_a_hung_collective(g: tuple[dict[tuple[int, int], list[float]], ...]) -> None:
    found = judge_hang(job(*g), NOW)
    assert found.verdict == "hung-collective" and found.culprits == ()
    assert "hung collective" in found.evidence[0]


@settings(max_examples=60, deadline=None)
@given(gpus_of(util=(92.0, 100.0), memory=(0.0, 8.0), min_gpus=3), st.integers(0, 31))
def test_one_idle_gpu_among_pinned_peers_is_named(g: tuple[dict[tuple[int, int], list[float]], ...],
                                                   pick: int) -> None:
    util, memory = g
    dead = sorted(util)[pick % len(util)]
    util = {**util, dead: [99.0, 99.0, 99.0, 0.0, 1.0, 0.0]}  # busy, then out of the collective
    found = judge_hang(job(util, memory), NOW)
    assert found.verdict == "rank-idle"
    (culprit,) = found.culprits
    assert (culprit.node, culprit.gpu_ref) == (f"node{dead[0]}", f"GPU-{dead[0]}-{dead[1]}")
    assert "dropped out of the collective" in found.evidence[0]


def test_an_idle_gpu_never_busy_is_evidence_but_no_culprit() -> None:
    keys = [(0, g) for g in range(4)]
    util = {k: [99.0] * REPORTS for k in keys} | {(0, 3): [0.0] * REPORTS}
    found = judge_hang(job(util, {k: [1.0] * REPORTS for k in keys}), NOW)
    assert found.verdict == "rank-idle" and found.culprits == () and "not seen busy" in found.evidence[0]


def test_half_the_gpus_idle_is_no_single_rank() -> None:
    keys = [(0, g) for g in range(4)]
    util = {k: [99.0] * 3 + [0.0] * 3 if k[1] < 2 else [99.0] * REPORTS for k in keys}
    assert judge_hang(job(util, {k: [1.0] * REPORTS for k in keys}), NOW).verdict == "none"


def test_too_little_to_judge() -> None:
    keys = [(0, 0), (0, 1)]
    one = job({k: [99.0] * REPORTS for k in keys}, {k: [0.0] * REPORTS for k in keys})
    assert judge_hang({"node0": one["node0"][-1:]}, NOW).verdict == "none"  # one report is a moment
    assert judge_hang(one, NOW + timedelta(minutes=5)).verdict == "none"  # the reports are stale
    lone = job({(0, 0): [99.0] * REPORTS}, {(0, 0): [0.0] * REPORTS})
    assert judge_hang(lone, NOW).verdict == "none"  # a collective needs two ranks
