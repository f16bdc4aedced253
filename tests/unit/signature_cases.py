"""What the table-driven signature tests share (test_signatures_families, _families_more, _xid):
the packaged catalogue, a matching helper, and the one check every line case gets, so the tables
split across files stay one test of one rule."""

from __future__ import annotations

from goodput.diagnose.signatures import Match, default_catalogue

CAT = default_catalogue()
K = "Nov 29 07:41:02 gpu-c12 kernel: "


def ids(line: str) -> list[str]:
    return sorted(m.signature.id for m in CAT.match_line(line, 1))


def hit(line: str, sig_id: str) -> Match:
    found = [m for m in CAT.match_line(line, 1) if m.signature.id == sig_id]
    assert found, f"{sig_id} did not match {line!r}; got {ids(line)}"
    return found[0]


def check_line_case(line: str, sig_id: str, groups: dict[str, str]) -> None:
    """`sig_id` matches `line` with these fields, and the catalogue's prefilter lets the line through."""
    m = hit(line, sig_id)
    for key, value in groups.items():
        assert m.groups.get(key, m.host if key == "host" else None) == value, key
    assert CAT.might_match(line)
