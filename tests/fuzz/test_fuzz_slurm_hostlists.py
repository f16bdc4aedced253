"""Hostile short Slurm text: hostlist expressions (bounded expansion, and compress/expand round
trips), `sbatch --parsable` output, `slurm-wlm` version strings and the error text of failed
commands, each returned or rejected with its typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import SchedulerError
from goodput.slurm import commands
from goodput.slurm.errors import classify, is_already_finished, is_pending_execution
from goodput.slurm.hostlist import MAX_EXPANDED, HostlistError, compress_hostlist, expand_hostlist
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.slurm_strategies import FIXTURES, fixture_lines, numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

# -- hostlists, sbatch, versions, error text ----------------------------------------------------

small = st.one_of(st.integers(0, 999), st.integers(0, 99999))
ranges = st.one_of(numbers, st.builds(lambda a, b: f"{a}-{b}", numbers, numbers),
                   st.builds(lambda a, b: f"{a}-{b}", small, small), small.map(str))
brackets = st.lists(ranges, min_size=0, max_size=4).map(lambda items: "[" + ",".join(items) + "]")
parts = st.lists(st.one_of(st.text(alphabet="abcnode-_.", max_size=8), brackets,
                           st.sampled_from(["[", "]", ",", "[[", "]]", " ", "\x00"])), max_size=8).map("".join)
hostlists = st.one_of(st.lists(parts, max_size=6).map(",".join), st.text(max_size=100),
                      st.builds(lambda p, n: p * n, parts, st.integers(0, 2000)))


@given(hostlists)
def test_hostlist_expand(expr: str) -> None:
    names = rejects_cleanly("hostlist-expand", lambda: expand_hostlist(expr), (HostlistError,))
    assert names is None or len(names) <= MAX_EXPANDED


ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
node_names = st.builds(lambda first, rest: first + rest, st.sampled_from(ALNUM),
                       st.text(alphabet=ALNUM + "_.-", max_size=20))


@given(st.lists(st.one_of(node_names, st.builds(lambda p, n: f"{p}{n}", st.sampled_from(["node", "gpu-", "n0", "x"]),
                                                st.integers(0, 10**6))), max_size=40))
def test_hostlist_roundtrip(names: list[str]) -> None:
    compressed = rejects_cleanly("hostlist-roundtrip", lambda: compress_hostlist(names), ())
    assert compressed is not None and set(expand_hostlist(compressed)) == set(names)


@given(st.one_of(st.builds(lambda n, c: f"{n};{c}\n", numbers, st.text(max_size=10)), st.text(max_size=100)))
def test_sbatch_parsable(stdout: str) -> None:
    job_id = rejects_cleanly("sbatch-parsable", lambda: commands.parse_sbatch_parsable(stdout),
                             (InvalidIdentifierError,))
    assert job_id is None or job_id.replace("_", "").replace("+", "").isdigit()


@given(st.one_of(st.builds(lambda a, b, c: f"slurm-wlm {a}.{b}.{c}\n", numbers, numbers, numbers),
                 st.text(max_size=300)))
def test_slurm_version(text: str) -> None:
    version = rejects_cleanly("slurm-version", lambda: commands.parse_version(text), ())
    assert version is not None and all(0 <= part < 10_000 for part in version)


ERROR_LINES = fixture_lines(*(p.name for p in FIXTURES.glob("errors-*.txt")))


@given(st.one_of(st.sampled_from(ERROR_LINES), st.text(max_size=200),
                 st.builds(lambda line, n: line * n, st.sampled_from(ERROR_LINES), st.integers(0, 20_000))),
       st.text(max_size=50), st.integers(-(2**31), 2**31))
def test_slurm_error_text(stderr: str, stdout: str, returncode: int) -> None:
    error = rejects_cleanly("slurm-error-text", lambda: classify(["scontrol", "requeue"], returncode, stdout, stderr),
                            ())
    assert isinstance(error, SchedulerError) and str(error).strip() and len(str(error)) < 600
    assert isinstance(is_pending_execution(stderr), bool) and isinstance(is_already_finished(stderr), bool)
