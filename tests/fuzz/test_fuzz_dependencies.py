"""Hostile job dependencies: a job's `--dependency` text is its owner's, and goodput parses it to
re-point or hold the chain. Any text parses or raises `DependencyError`, and what goodput would
write back is always one `scontrol` argument of Slurm's own characters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.slurm.commands import update_dependency
from goodput.slurm.dependencies import DependencyError, parse, repointed
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

KINDS = ["after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer", "singleton", "before", ""]
targets = st.one_of(st.integers(0, 10**13).map(str), st.text(max_size=12),
                    st.tuples(st.integers(0, 999), st.sampled_from(["", "_3", "_*", "+5", "(unfulfilled)", "(failed)"]))
                    .map(lambda t: f"{t[0]}{t[1]}"))
conditions = st.tuples(st.sampled_from(KINDS), st.lists(targets, max_size=4)).map(
    lambda c: c[0] + (":" + ":".join(c[1]) if c[1] else ""))
texts = st.one_of(st.lists(conditions, max_size=4).flatmap(
    lambda parts: st.sampled_from([",", "?", ";"]).map(lambda sep: sep.join(parts))), st.text(max_size=200))


@given(texts, st.integers(0, 999).map(str))
def test_dependencies(text: str, old: str) -> None:
    parsed = rejects_cleanly("slurm-dependency", lambda: parse(text), (DependencyError,))
    if parsed is None:
        return
    rendered = repointed(parsed, old, "4242").render()
    assert parse(rendered) is not None
    assert update_dependency("13", rendered)[-1] == f"Dependency={rendered}"  # never refused, never split
