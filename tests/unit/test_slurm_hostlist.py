"""Hostlist expansion: the node names goodput drains and excludes come from these strings."""

import pytest

from goodput.slurm.hostlist import (
    MAX_EXPRESSION,
    HostlistError,
    compress_hostlist,
    expand_hostlist,
    hostlist_size,
)


@pytest.mark.parametrize(("expr", "names"), [
    ("node1", ("node1",)),
    ("node[1-3,5]", ("node1", "node2", "node3", "node5")),
    ("node[1-2],login1", ("node1", "node2", "login1")),
    ("gpu[08-10]", ("gpu08", "gpu09", "gpu10")),
    ("rack[1-2]-gpu[1-2]", ("rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2")),
    ("a[1-2],b[3],c", ("a1", "a2", "b3", "c")),
    ("node[1-2],node2", ("node1", "node2")),
    ("", ()),
    ("(null)", ()),
    (None, ()),
])
def test_expand(expr: str | None, names: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize("expr", ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[[1]]",
                                  "node[1-999999999]"])
def test_expand_rejects_malformed(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(expr)


@pytest.mark.parametrize("names", [
    ["node1", "node2", "node3", "node5"],
    ["gpu08", "gpu09", "gpu10", "login", "node7"],
    ["n1"],
    [],
])
def test_compress_round_trips(names: list[str]) -> None:
    assert set(expand_hostlist(compress_hostlist(names))) == set(names)


def test_compress_is_compact() -> None:
    assert compress_hostlist(["node1", "node2", "node3", "node5"]) == "node[1-3,5]"
    assert compress_hostlist(["node4"]) == "node4"


# -- a few bytes must not stand for a billion names --------------------------------------------

def test_size_is_computed_before_anything_is_built() -> None:
    assert hostlist_size("node[1-3,5],login1") == 5
    assert hostlist_size("r[1-2]-g[01-10]") == 20
    with pytest.raises(HostlistError, match="more than"):
        hostlist_size("a[1-99999]b[1-99999]")
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist("a[1-99999]b[1-99999]")  # 10**10 names: refused, not built
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist(",".join(["n[1-60000]"] * 2))


def test_many_brackets_do_not_recurse() -> None:
    with pytest.raises(HostlistError, match="characters"):
        expand_hostlist("a[1]" * 1200)  # a RecursionError before
    assert expand_hostlist("a[1]" * 20) == ("a1" * 20,)


@pytest.mark.parametrize("expr", [
    "node[1-" + "9" * 5000 + "]", "node[" + "1" * 5000 + "]", "n[0-" + "9" * 19 + "]",
    "x" * (MAX_EXPRESSION + 1), "node 1", "node\n1", "node[1-2]\x00", "a" * 200,
])
def test_unbounded_input_is_a_hostlist_error(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(expr)


def test_compress_leaves_long_numbers_alone() -> None:
    name = "n" + "9" * 60
    assert compress_hostlist([name, "n1", "n2"]) == f"{name},n[1-2]"
    assert set(expand_hostlist(compress_hostlist([name, "n1", "n2"]))) == {name, "n1", "n2"}
