"""Straggler detection with robust statistics over per-rank step times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goodput.detect import StragglerConfig, find_stragglers, straggler_anomaly
from goodput.models import AnomalyKind, Category

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def fleet(n: int = 16, base: float = 1.0, jitter: float = 0.01) -> dict[int, list[float]]:
    return {r: [base + jitter * ((r * 7 + i * 3) % 5 - 2) / 2 for i in range(30)] for r in range(n)}


def test_uniform_fleet_has_no_straggler() -> None:
    assert find_stragglers(fleet()) == []


def test_one_slow_rank_is_named_with_its_host() -> None:
    times = fleet()
    times[11] = [1.3] * 30
    found = find_stragglers(times, hosts={r: f"hx-{r // 8}" for r in times})
    assert [(f.rank, f.host) for f in found] == [(11, "hx-1")]
    assert found[0].slowdown == pytest.approx(0.3, abs=0.02)
    assert "rank 11 on hx-1" in found[0].explanation


def test_one_outlier_sample_does_not_make_a_straggler() -> None:
    times = fleet()
    times[4][10] = 9.0  # a single hiccup (GC, checkpoint): the median ignores it
    assert find_stragglers(times) == []


def test_small_relative_slowdown_is_not_flagged_even_if_many_sigmas() -> None:
    times = {r: [1.0] * 20 for r in range(8)}
    times[3] = [1.05] * 20  # 5 %: many MADs in a perfectly uniform fleet, but below min_slowdown
    assert find_stragglers(times) == []
    assert [f.rank for f in find_stragglers(times, config=StragglerConfig(min_slowdown=0.01, z=3.0))] == [3]


def test_too_little_data() -> None:
    times = {0: [1.0] * 3, 1: [5.0] * 3, 2: [1.0] * 3, 3: [1.0] * 3}
    assert find_stragglers(times) == []  # fewer than min_samples per rank
    assert find_stragglers({0: [1.0] * 10, 1: [9.0] * 10}) == []  # fewer than min_ranks


def test_window_uses_recent_samples() -> None:
    times = fleet()
    times[5] = [3.0] * 100 + [1.0] * 50  # slow long ago, fine now
    assert find_stragglers(times) == []


def test_slowest_first_and_anomaly() -> None:
    times = fleet()
    times[2] = [1.5] * 30
    times[9] = [2.0] * 30
    found = find_stragglers(times, hosts={2: "hx-0", 9: "hx-1"})
    assert [f.rank for f in found] == [9, 2]
    a = straggler_anomaly(found, anomaly_id="s-1", job_id="42", observed_at=NOW, detected_at=NOW)
    assert a is not None
    assert (a.kind, a.category, a.nodes, a.ranks) == (AnomalyKind.STRAGGLER, Category.STRAGGLER, ("hx-1", "hx-0"),
                                                     (9, 2))
    assert straggler_anomaly([], anomaly_id="s-2", job_id="42", observed_at=NOW, detected_at=NOW) is None


# A rank starved of CPU at start-up (an overloaded node, a slow rendezvous) prints its first steps
# late and slow, as every framework's first iterations are (compilation, NCCL set-up, allocator
# warm-up). Its window then holds nothing but that warm-up while the others' hold a steady rhythm:
# a start-up, not a straggler. Before the fix its first five steps alone named it.
WARM_UP = [3.0, 2.0, 1.6, 1.4, 1.3]


def test_a_rank_judged_on_its_warm_up_alone_is_not_a_straggler() -> None:
    times = {r: [1.0] * 50 for r in range(3)}
    times[3] = list(WARM_UP)
    assert find_stragglers(times, hosts={0: "n3", 1: "n3", 2: "n4", 3: "n4"}) == []


def test_a_late_rank_is_judged_once_it_has_steps_past_its_warm_up() -> None:
    times = {r: [1.0] * 50 for r in range(3)}
    times[3] = [*WARM_UP, *[1.0] * 5]  # it caught up: steady at the fleet's pace
    assert find_stragglers(times) == []
    times[3] = [*WARM_UP, *[1.3] * 5]  # still 30 % slow once past its warm-up: a straggler
    assert [f.rank for f in find_stragglers(times)] == [3]


def test_a_full_window_is_judged_whole() -> None:
    times = {r: [1.0] * 50 for r in range(3)}
    times[3] = [1.3] * 50  # slow from its very first step, window full: no step set aside
    assert [f.rank for f in find_stragglers(times)] == [3]
