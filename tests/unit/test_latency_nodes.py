"""The latency benchmark's node classes run their rounds in batches: half the drain nodes faulted at
once, the other half left idle for the requeued runs, every round in exactly one batch."""

from __future__ import annotations

import pytest

from benchmarks._latency_nodes import at_once, batches, responding


@pytest.mark.parametrize(("drain_nodes", "size"), [(1, 1), (3, 1), (4, 2), (10, 5), (20, 10)])
def test_a_batch_faults_at_most_half_the_drain_nodes(drain_nodes: int, size: int) -> None:
    assert at_once(drain_nodes) == size
    assert drain_nodes == 1 or 2 * size <= drain_nodes  # as many idle nodes as requeued runs


def test_every_round_runs_once_in_order() -> None:
    assert batches(20, 10) == [range(0, 10), range(10, 20)]
    assert batches(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert [i for b in batches(7, 3) for i in b] == list(range(7))
    assert batches(0, 3) == []


def test_a_node_answers_once_sinfo_drops_its_star_and_it_is_not_down() -> None:
    assert responding("idle") and responding("drained")
    assert not responding("idle*") and not responding("down") and not responding("")
