"""The matcher: prefilter, prefixes, robustness against hostile input, streaming."""

from __future__ import annotations

import pytest

from goodput.diagnose.signatures import MAX_SCAN_CHARS, LineContext, default_catalogue, split_prefix
from goodput.untrusted_text import LiteralSet, any_of

CAT = default_catalogue()

CLEAN = [
    " 0: [rank0]: iteration     1200/  250000 | consumed samples:       614400 | elapsed time per iteration "
    "(ms): 1841.2 | learning rate: 2.994E-04 | lm loss: 2.718203E+00 | loss scale: 1.0 | grad norm: 0.532 |",
    "hx-1:2201:2250 [0] NCCL INFO Channel 00/0 : 0[3b000] -> 1[5e000] via P2P/IPC",
    "[titan] 2026-11-28 23:59:31,101 - root - INFO - step: 18120  loss:  2.4410  memory: 58.31GiB(73.69%)",
    "",
]


@pytest.mark.parametrize("line", CLEAN)
def test_clean_lines_stop_at_the_prefilter(line: str) -> None:
    assert not CAT.might_match(line)
    assert CAT.match_line(line) == []


def test_the_literal_prefilter_finds_exactly_the_literals() -> None:
    first = any_of(["abc", "abd", "ab", "x.y"])
    assert first.search(b"zzabzz") and first.search(b"x.y") and not first.search(b"xzy")
    assert not first.search(b"a b")
    present = LiteralSet(["abc", "x.y", "b", "(?i)"])
    assert sorted(present.present(b"zzabcz (?i)")) == [0, 2, 3] and present.present(b"xzy") == []


@pytest.mark.parametrize(("line", "context", "body"), [
    ("  3: KeyError: 'x'", LineContext(task=3), "KeyError: 'x'"),
    ("12: [rank12]: ValueError", LineContext(rank=12, task=12), "ValueError"),
    ("[rank5]:[E1129 07:41:05 ProcessGroupNCCL.cpp:1] x", LineContext(rank=5),
     "[E1129 07:41:05 ProcessGroupNCCL.cpp:1] x"),
    ("hx-1:2201:2250 [0] NCCL WARN boom", LineContext(host="hx-1"), "NCCL WARN boom"),
    ("Nov  9 07:41:02 gpu-c12 kernel: [ 12.5] NVRM: Xid", LineContext(host="gpu-c12"), "NVRM: Xid"),
    ("2026-11-29T07:41:02.123+00:00 gpu-c12 kernel: NVRM: Xid", LineContext(host="gpu-c12"), "NVRM: Xid"),
    ("[ 8812.221] NVRM: Xid", LineContext(), "NVRM: Xid"),
    ("node7: [rank3]: KeyError", LineContext(host="node7", rank=3), "KeyError"),
    ("[hx-3:4411 :0:4498] Caught signal 7", LineContext(host="hx-3"), "Caught signal 7"),
    ("RuntimeError: CUDA error", LineContext(), "RuntimeError: CUDA error"),
    ("2019-06-02T16:13:44.884Z: [1,12]<stdout>:c-57:815:864 [0] NCCL WARN x", LineContext(host="c-57", rank=12),
     "NCCL WARN x"),
    ("[1,3]<stderr>:NET/OFI Request failed", LineContext(rank=3), "NET/OFI Request failed"),
    ("node01: VM-0-14-centos:51:70 [0] NCCL WARN x", LineContext(host="node01"), "NCCL WARN x"),
    ("[2026-12-01 06:43:41,184] [INFO] [RankMonServer26080@vm:1] Did not get subsequent heartbeat.",
     LineContext(host="vm", rank=1), "Did not get subsequent heartbeat."),
    ("[2026-12-01 06:43:41,184] [INFO] [ft_launcher26073@vm] [default] Worker group UNHEALTHY.",
     LineContext(host="vm"), "[default] Worker group UNHEALTHY."),
    ("2026-12-01 06:47:11,728 [WARNING] [vm] [workload:?(1) infra:?(?)] rank_monitor_server.py:497 [Cycle 0] x",
     LineContext(host="vm", rank=1), "[Cycle 0] x"),
    ("2026-12-01 06:47:12,004 [INFO] [vm] [workload:?(?) infra:?(?)] launcher.py:636 [default] y",
     LineContext(host="vm"), "[default] y"),
])
def test_prefixes(line: str, context: LineContext, body: str) -> None:
    assert split_prefix(line) == (context, body)


def test_specific_rule_displaces_generic_one_on_the_same_line() -> None:
    hits = CAT.match_line("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert [h.signature.id for h in hits] == ["cuda-illegal-access"]


def test_generic_rule_fires_alone() -> None:
    hits = CAT.match_line(" 3: KeyError: 'input_ids'", 9)
    assert [(h.signature.id, h.line_no, h.rank) for h in hits] == [("python-exception", 9, 3)]


def test_huge_line_is_capped_and_a_hit_beyond_the_cap_is_ignored() -> None:
    tail = "srun: error: Node failure on hx-9"
    assert CAT.match_line("x" * (MAX_SCAN_CHARS - 100) + tail)
    assert CAT.match_line("x" * (2 * 1024 * 1024) + tail) == []
    assert CAT.might_match("y" * (2 * 1024 * 1024) + tail) is False


def test_binary_garbage_and_replacement_characters_do_not_crash() -> None:
    junk = bytes(range(256)).decode("latin-1") + "\ufffd\x00" * 100
    assert CAT.match_line(junk) == []
    assert [m.signature.id for m in CAT.match_line("\x00\ufffd srun: error: Node failure on hx-9\x00")] == [
        "slurm-node-failure"]


def test_scan_numbers_lines_and_streams() -> None:
    def lines():  # a generator: scan must not need len() or indexing
        yield from CLEAN
        yield "srun: error: Node failure on hx-9"
        yield from CLEAN

    found = [(m.line_no, m.signature.id, m.host) for m in CAT.scan(lines())]
    assert found == [(len(CLEAN) + 1, "slurm-node-failure", "hx-9")]


def test_match_is_hashable_free_of_shared_state() -> None:
    a = CAT.match_line("srun: error: Node failure on hx-9", 1)[0]
    b = CAT.match_line("srun: error: Node failure on hx-8", 2)[0]
    assert a.groups == {"host": "hx-9"} and b.groups == {"host": "hx-8"}


def test_overlapping_and_nested_literals_all_reach_their_rules() -> None:
    from goodput.diagnose.signatures import Catalogue, Signature

    def sig(i: str, lit: str) -> Signature:
        return Signature(id=i, family="t", category="unknown", culprit_kind="unknown", precedence=1,
                         pattern=lit, literals=(lit,), restart=True, drain=False, explanation="t")

    cat = Catalogue([sig("a", "abcd"), sig("b", "cdef"), sig("c", "Kill"), sig("d", "Killed by"),
                     sig("e", "Kill task")])
    assert sorted(m.signature.id for m in cat.match_line("xxabcdefxx")) == ["a", "b"]
    assert sorted(m.signature.id for m in cat.match_line("Killed by Kill task")) == ["c", "d", "e"]
    assert sorted(m.signature.id for m in cat.match_line("Killed by")) == ["c", "d"]
