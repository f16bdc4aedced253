"""Hostlist expansion: the node names goodput drains and excludes come from these strings."""

import pytest

from goodput.slurm.hostlist import HostlistError, compress_hostlist, expand_hostlist


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
