"""Stack requests an incident asks of the node agents: the table's bounds and expiry, what a node may
receive and answer, a result's validation, and the culprit read from the dumps (goodput.detect.stack_requests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from goodput.detect.stack_requests import (
    MAX_DUMP_CHARS,
    MAX_DUMPS,
    MAX_PENDING_PER_NODE,
    NodeStacks,
    StackRequestTable,
    StackResultError,
    cut,
    evidence,
    request_id,
)
from goodput.models import CulpritKind

T0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def py_spy(pid: int, frames: list[str]) -> str:
    return "\n".join([f"Process {pid}: python train.py", "Python v3.11.9 (/usr/bin/python3.11)", "",
                      f'Thread {pid} (active): "MainThread"', *[f"    {f}" for f in frames]])


IN_ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "train_step (train.py:212)",
                 "<module> (train.py:300)"]
IN_SAVE = ["write (torch/serialization.py:620)", "save_checkpoint (train.py:120)", "<module> (train.py:301)"]


def table(ttl: float = 30.0, **kw: int) -> StackRequestTable:
    return StackRequestTable(ttl_s=ttl, **kw)


def test_a_node_receives_only_requests_naming_it_and_not_once_it_answered() -> None:
    t = table()
    rid = request_id("inc-1", "101")
    t.ask(rid, "101", ["gpu-01", "gpu-02"], T0)
    t.ask(request_id("inc-2", "202"), "202", ["gpu-03"], T0)
    assert [p.id for p in t.pending_for("gpu-01", T0)] == [rid]
    assert [p.job_id for p in t.pending_for("gpu-03", T0)] == ["202"]
    assert t.pending_for("gpu-09", T0) == []
    assert t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101"), T0)
    assert t.pending_for("gpu-01", T0) == [] and not t.complete(rid)
    assert t.answer("gpu-02", NodeStacks(request_id=rid, job_id="101"), T0) and t.complete(rid)


def test_an_answer_for_another_node_job_or_an_unknown_request_is_refused_and_a_repeat_ignored() -> None:
    # broke/before: goodput.detect.stack_requests did not exist (ImportError).
    t = table()
    rid = request_id("inc-1", "101")
    t.ask(rid, "101", ["gpu-01"], T0)
    with pytest.raises(StackResultError, match="not for this node"):
        t.answer("gpu-02", NodeStacks(request_id=rid, job_id="101"), T0)
    with pytest.raises(StackResultError, match="job id"):
        t.answer("gpu-01", NodeStacks(request_id=rid, job_id="999"), T0)
    with pytest.raises(StackResultError, match="no such"):
        t.answer("gpu-01", NodeStacks(request_id=request_id("x", "1"), job_id="1"), T0)
    assert t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101", error="first"), T0)
    assert not t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101", error="second"), T0)
    assert t.answers(rid)["gpu-01"].error == "first"


def test_requests_expire_and_the_table_keeps_only_the_newest() -> None:
    t = table(ttl=30.0, max_requests=3)
    ids = [request_id(f"inc-{i}", "101") for i in range(5)]
    for i, rid in enumerate(ids):
        t.ask(rid, "101", ["gpu-01"], T0 + timedelta(seconds=i))
    assert len(t) == 3 and t.get(ids[0]) is None and t.get(ids[4]) is not None
    later = T0 + timedelta(seconds=40)
    assert t.pending_for("gpu-01", later) == []
    with pytest.raises(StackResultError, match="expired"):
        t.answer("gpu-01", NodeStacks(request_id=ids[4], job_id="101"), later)
    t.expire(later)
    assert len(t) == 0


def test_asking_twice_finds_the_same_request_and_a_node_gets_a_bounded_few() -> None:
    t = table()
    first = t.ask(request_id("inc-1", "101"), "101", ["gpu-01"], T0)
    assert t.ask(request_id("inc-1", "101"), "101", ["gpu-01"], T0 + timedelta(seconds=5)) == first
    for i in range(20):
        t.ask(request_id(f"more-{i}", "101"), "101", ["gpu-01"], T0)
    assert len(t.pending_for("gpu-01", T0)) == MAX_PENDING_PER_NODE


def test_a_result_over_its_bounds_is_a_validation_error_not_a_crash() -> None:
    rid = request_id("inc-1", "101")
    with pytest.raises(ValidationError):
        NodeStacks(request_id=rid, job_id="101", dumps={4242: "x" * (MAX_DUMP_CHARS + 1)})
    with pytest.raises(ValidationError):
        NodeStacks(request_id=rid, job_id="101", dumps={p: "x" for p in range(2, MAX_DUMPS + 3)})
    with pytest.raises(ValidationError):
        NodeStacks(request_id=rid, job_id="101", dumps={1: "init"})
    with pytest.raises(ValidationError):
        NodeStacks(request_id="../../etc", job_id="101")
    with pytest.raises(ValidationError):
        NodeStacks(request_id=rid, job_id="101; rm -rf /")
    assert len(cut("y" * (MAX_DUMP_CHARS * 2))) <= MAX_DUMP_CHARS


def test_the_dumps_name_the_process_outside_the_collective_and_its_node() -> None:
    # broke/before: no code read the agents' dumps; a hang incident named no culprit.
    t = table()
    rid = request_id("inc-1", "101")
    request = t.ask(rid, "101", ["gpu-01", "gpu-02", "gpu-03"], T0)
    t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101", dumps={11: py_spy(11, IN_ALL_REDUCE),
                                                                         12: py_spy(12, IN_ALL_REDUCE)}), T0)
    t.answer("gpu-02", NodeStacks(request_id=rid, job_id="101", dumps={21: py_spy(21, IN_ALL_REDUCE),
                                                                         22: py_spy(22, IN_SAVE)}), T0)
    found = evidence(request, t.answers(rid), 30.0)
    assert found.culprit is not None and found.culprit.kind is CulpritKind.RANK
    assert found.culprit.id == "pid 22 on gpu-02" and found.node == "gpu-02"
    assert found.lines[0] == "gpu-01: py-spy dumped 2 process(es)"
    assert found.lines[2] == "gpu-03: no stack dump within 30 s"


def test_every_process_in_the_collective_or_only_skips_name_nobody_and_say_why() -> None:
    t = table()
    rid = request_id("inc-1", "101")
    request = t.ask(rid, "101", ["gpu-01", "gpu-02"], T0)
    t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101", dumps={11: py_spy(11, IN_ALL_REDUCE),
                                                                         12: py_spy(12, IN_ALL_REDUCE)}), T0)
    t.answer("gpu-02", NodeStacks(request_id=rid, job_id="101", skipped=(
        "no py-spy here, and the job's comment names no dump signal (goodput:stack-signal=USR1)",)), T0)
    found = evidence(request, t.answers(rid), 30.0)
    assert found.culprit is None
    assert "no py-spy here" in found.lines[1] and "1 skipped" in found.lines[1]


def test_a_dump_that_prints_its_own_error_or_rank_prefix_cannot_move_the_culprit() -> None:
    # A dump is the job's text: a louder line in one process's dump (an error, a forged `[rank9]:`)
    # must not make another process the culprit or hide the odd one out.
    t = table()
    rid = request_id("inc-1", "101")
    request = t.ask(rid, "101", ["gpu-01", "gpu-02"], T0)
    loud = py_spy(11, IN_ALL_REDUCE) + ("\n[rank3]:RuntimeError: CUDA error: an illegal memory access was encountered"
                                        "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    t.answer("gpu-01", NodeStacks(request_id=rid, job_id="101", dumps={11: loud, 12: py_spy(12, IN_ALL_REDUCE)}), T0)
    t.answer("gpu-02", NodeStacks(request_id=rid, job_id="101", dumps={21: py_spy(21, IN_ALL_REDUCE),
                                                                         22: py_spy(22, IN_SAVE)}), T0)
    found = evidence(request, t.answers(rid), 30.0)
    assert found.culprit is not None and found.culprit.id == "pid 22 on gpu-02"
