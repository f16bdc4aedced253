"""No log line can freeze the matcher: every regex that reads job output is an RE2 automaton.

The old catalogue ran on Python's backtracking `re`: a 63 KB line of a repeated Xid-154 phrase
cost ~20 s of one core (cubic), the NVLink5 and NVLS rules were quadratic. These tests assert the
construction, not a time: no backtracking pattern object is reachable from anything that reads
log text, patterns RE2 cannot run are refused when the catalogue loads, and the pathological
lines are classified exactly like their honest versions.
"""

from __future__ import annotations

import gc
import re
import types
from collections.abc import Iterator
from typing import Any

import pytest

from goodput.detect import kmsg
from goodput.detect.progress import ProgressParser
from goodput.detect.push import batch as push_batch
from goodput.diagnose.signatures import Catalogue, CatalogueError, default_catalogue, prefixes, split_prefix, verdict
from goodput.diagnose.signatures.loader import parse
from goodput.untrusted_text import LinearPatternError, LinearRegex, bounded_int, utf8

CAT = default_catalogue()
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.CodeType, types.FrameType)


def reachable(*roots: object) -> Iterator[object]:
    """Every object reachable from `roots` through instance data (not through classes or modules)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        yield obj
        stack.extend(gc.get_referents(obj))


def module_values(module: types.ModuleType) -> list[Any]:
    return [v for k, v in vars(module).items() if not k.startswith("__")]


def test_no_backtracking_pattern_is_reachable_from_what_reads_log_text() -> None:
    for sig in CAT.signatures:
        assert isinstance(sig.regex, LinearRegex), sig.id
    roots = [CAT, ProgressParser(), *module_values(prefixes), *module_values(kmsg),
             *module_values(verdict), *module_values(push_batch)]
    found = list(reachable(*roots))
    assert [o for o in found if isinstance(o, re.Pattern)] == []
    assert sum(isinstance(o, LinearRegex) for o in found) >= len(CAT) + 20


@pytest.mark.parametrize("pattern", [
    r"boom(?=x)", r"boom(?!x)", r"(?<=x)boom", r"(?<!x)boom", r"(b)oom\1", r"(?P<code>b)oom(?P=code)",
    r"boom(?>x+)", r"boom x++",
])
def test_a_pattern_that_needs_backtracking_is_refused_at_load_time(pattern: str) -> None:
    entry = {"id": "t-1", "family": "t", "category": "gpu-hardware", "culprit_kind": "gpu", "precedence": 10,
             "pattern": pattern, "literals": ["boom"], "restart": True, "drain": False, "explanation": "t"}
    with pytest.raises(CatalogueError, match="not a linear-time pattern"):
        parse({"version": 1}, [("t.toml", {"signature": [entry]})])
    with pytest.raises(LinearPatternError):
        LinearRegex(pattern)


def test_a_literal_with_a_newline_is_refused() -> None:
    entry = {"id": "t-1", "family": "t", "category": "unknown", "culprit_kind": "unknown", "precedence": 1,
             "pattern": "a", "literals": ["a\nb"], "restart": True, "drain": False, "explanation": "t"}
    with pytest.raises(CatalogueError, match="cannot span lines"):
        parse({"version": 1}, [("t.toml", {"signature": [entry]})])


def repeated(phrase: str, size: int = 63_000) -> str:
    return (phrase * (size // len(phrase) + 1))[:size]


# Each phrase made the old engine backtrack: cubic for Xid 154 (`.*recovery action changed from
# .* to`), quadratic for the NVLink5 (`.*\bFatal\b`) and NVLS / shm rules (`.*` after a prefix).
PATHOLOGICAL = [
    ("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from ", ["xid-154"]),
    ("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to ", ["xid-154"]),
    ("NVRM: Xid (PCI:0000:4e:00): 149, pid=2217,  ", ["xid-149"]),
    ("transport/nvls.cc:162 NC ", []),
    ("NCCL WARN ", []),
    ("srun: error: node1: tasks 0,", []),
    ("[1, 2, 3, " * 10, []),
    # The vendor code tables: a CUDA wrapper's words before a message, UCX's words before a syndrome,
    # the OFI plugin's code before an EFA message, a Slurm client's words before a message, none of
    # them ever completed.
    ("Cuda failure 217 'peer access is not supported ", []),
    ("Transport retry count exceeded on mlx5_0:1/IB (synd ", []),
    ("Error: 5 (Local memory registration is invalid, ", []),
    ("srun: error: Unable to create step for job 81234: Memory required by task is not ", []),
    ("slurm_load_jobs error: slurm_load_jobs error: Unable to contact slurm ", []),
    ("Job 81234 step creation temporarily disabled, retrying (Requested nodes are ", ["srun-step-creation-retrying"]),
    ("OSError: [Errno 12] Cannot allocate ", ["python-exception"]),
    ("(errno: 113 - No route to ", []),
    ("(gai error: -3 - Temporary failure in name ", []),
]


@pytest.mark.parametrize(("phrase", "expected"), PATHOLOGICAL)
def test_pathological_lines_are_classified_like_short_ones(phrase: str, expected: list[str]) -> None:
    line = repeated(phrase)
    assert sorted(m.signature.id for m in CAT.match_line(line, 1)) == expected
    assert sorted(m.signature.id for m in CAT.match_line(repeated(phrase, 4 * len(phrase)), 1)) == expected


def test_the_real_xid_154_line_after_a_pathological_one() -> None:
    real = ("Nov 29 07:41:02 gpu-c12 kernel: NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed "
            "from 0x0 (None) to 0x2 (Node Reboot Required)")
    lines = [repeated(PATHOLOGICAL[0][0]), real, repeated(PATHOLOGICAL[1][0])]
    hits = [(m.line_no, m.signature.id, m.groups.get("action"), m.host) for m in CAT.scan(lines)]
    assert (2, "xid-154-action", "0x2 (Node Reboot Required)", "gpu-c12") in hits
    assert [h[1] for h in hits if h[0] != 2] == ["xid-154", "xid-154"]


@pytest.mark.parametrize("line", [
    "  rank      : {n} (local_rank: 0)",
    "hx-2:52110:52110 [5] NCCL INFO comm 0x55e3 rank {n} nranks {n} cudaDev 5 busId bb000 commId 0x9 - Init COMPLETE",
    "[rank0]: ranks [{n}, 3] are the lagging ranks that caused this timeout.",
    "[rank0]:    - [{n}] joined but didn't finish collective #{n} (count from 1)",
    "[E1129 ProcessGroupNCCL.cpp:632] [Rank {n}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, NumelIn={n}, NumelOut=1, Timeout(ms)=600000) ran for 6 ms",
    "srun: error: hx-1: task {n}: Exited with exit code {n}",
    "  exitcode  : -{n} (pid: {n})",
    "NVRM: Xid (PCI:0000:3b:00): {n}, pid={n}, name=python3, GPU has fallen off the bus.",
    "SXid (PCI:0000:3b:00.0): {n}, Non-fatal, Link 12",
    "[rank{n}]:[E623 ProcessGroupNCCL.cpp:1827] [PG ID {n} PG GUID 0(default_pg) Rank {n}] Received a dump signal "
    "due to a collective timeout from  rank {n} and we will try our best to dump the debug info. Last enqueued NCCL "
    "work: {n}, last completed NCCL work: {n}.",
])
@pytest.mark.parametrize("digits", [5000, 19])
def test_huge_numbers_in_fields_never_raise_and_are_never_taken(line: str, digits: int) -> None:
    """Before: int() of a >4,300-digit group raised inside the verdict or the locator."""
    from goodput.diagnose.classify import classify_lines

    text = line.format(n="9" * digits)
    lines = ["  host      : hx-6", text, "  exitcode  : 1 (pid: 4242)",
             "[rank0]: RuntimeError: boom", "[rank0]: RuntimeError: boom"]
    verdict = classify_lines(lines)
    assert verdict.rank is None or verdict.rank < 10**9
    assert all(len(e.text) <= 512 + len("…[truncated]") for e in verdict.evidence)


def test_bounded_int() -> None:
    assert bounded_int("42") == 42 and bounded_int("-7", signed=True) == -7
    assert bounded_int("9" * 18) == 10**18 - 1 and bounded_int("9" * 19) is None
    for bad in (None, "", "-", "-7", "4 2", "٣", "²", "0x1f", "9" * 5000, "+1"):
        assert bounded_int(bad) is None, bad


def test_prefixes_count_ascii_digits_only_and_keep_the_body_intact() -> None:
    assert split_prefix("٣: KeyError")[0].task is None  # an Arabic-Indic three is not a task id
    context, body = split_prefix("  3: [rank3]: caf\u00e9 \ud800 na\u00efve")
    assert (context.task, context.rank, body) == (3, 3, "caf\u00e9 \ud800 na\u00efve")
    assert utf8("\ud800") == b"?"


def test_the_catalogue_matches_lone_surrogates_and_nul_bytes() -> None:
    hits = Catalogue(CAT.signatures).match_line("\ud800\x00 srun: error: Node failure on hx-9 \udfff")
    assert [(h.signature.id, h.host) for h in hits] == [("slurm-node-failure", "hx-9")]


@pytest.mark.parametrize(("line", "peer"), [
    ("hx-1:2201:2250 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
     "hx-7<49122>", "hx-7"),
    ("NCCL WARN socketProgress: Connection closed by localRank 3", None),
    # A fix: the old `socketProgress(?!.*Connection closed)` (a lookahead RE2 refuses) missed this line.
    ("NCCL WARN socketProgress: Connection closed by peer 10.0.0.7", None),
    ("NCCL WARN socketProgress: Connection reset", None),
    ("NCCL WARN Socket recv failed; Connection closed by remote peer hx-9<1>", "hx-9"),
])
def test_the_socket_closed_rule_rewritten_without_lookahead(line: str, peer: str | None) -> None:
    [hit] = [m for m in CAT.match_line(line, 1) if m.signature.id == "nccl-socket-closed"]
    assert hit.groups.get("peer") == peer


def test_every_fixture_line_matches_as_with_the_old_backtracking_engine() -> None:
    from tests.fuzz.backtracking_reference import OldMatcher, new_match
    from tests.fuzz.log_strategies import REAL_LINES

    old = OldMatcher(CAT)
    assert len(REAL_LINES) > 200
    assert [line for line in REAL_LINES if new_match(CAT, line) != old.match(line)] == []


def test_the_literal_set_reports_every_literal_at_once() -> None:
    """A set has no slower fallback (out of DFA memory it would report nothing): its budget must
    hold the whole automaton, here all of the catalogue's literals in one line, many times over."""
    literals = sorted({lit for sig in CAT.signatures for lit in sig.literals})
    text = utf8(" ".join(literals) * 40)
    assert len(CAT.candidates(text)) == len(CAT)
    assert CAT.match_line(" ".join(literals))  # and the regexes still run on such a line
