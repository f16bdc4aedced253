"""Hypothesis strategies for job output: real lines, mutated the way an attacker would.

Random noise rarely reaches a signature's regex, so most examples start from a real line (the
fixture logs, the catalogue's example lines, the kernel-log fixtures) and then get the treatment
that broke parsers before: numbers swapped for huge ones, a phrase repeated until the line is tens
of kilobytes, launcher prefixes stacked, lone surrogates, NULs and raw noise spliced in.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import strategies as st

from goodput.diagnose.classify import iter_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted((FIXTURES / "logs").glob("*.log")) + sorted((FIXTURES / "kmsg").iterdir()):
        if path.stat().st_size > 1 << 20:
            continue  # huge_line.log: the long-line mutation covers it
        with path.open("rb") as f:
            lines += [line for line in iter_lines(f) if line.strip()]
    from tests.unit.test_signatures_families import LINE_CASES, NEAR_MISSES
    from tests.unit.test_signatures_families_more import LINE_CASES_MORE
    from tests.unit.test_signatures_xid import XID, XID_CASES

    lines += [line for line, _, _ in LINE_CASES + LINE_CASES_MORE]
    lines += [XID.format(code=c[0], tail=c[1]) for c in XID_CASES]
    lines += NEAR_MISSES
    return sorted(set(lines))


REAL_LINES = _fixture_lines()
PREFIXES = ["", " 3: ", "12: ", "[rank5]: ", "node7: [rank3]: ", "hx-1:2201:2250 [0] ", "[Rank 2] ",
            "Nov 29 07:41:02 gpu-c12 kernel: ", "2026-11-29T07:41:02.123+00:00 gpu-c12 kernel: ",
            "[ 8812.221] ", "[hx-3:4411 :0:4498] ", "  9999999: ", "[rank99999999999]: "]
_DIGITS = re.compile(r"\d+")

numbers = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(0, 2**64).map(str),
    st.integers(19, 6000).map(lambda n: "9" * n),
    st.sampled_from(["-1", "-0", "0x1f", "\u0663", "\u00b2", "1e308", "NaN", "inf", "00000", "1_000", ""]),
)


_OPS = st.lists(st.sampled_from(["number", "repeat", "prefix", "splice", "cut"]), max_size=4)
_NOISE = st.text(max_size=40)
_ASCII_NOISE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
_FRACTION = st.floats(0, 1, exclude_max=True)  # one draw picks a position in anything


def _at(draw: st.DrawFn, length: int) -> int:
    return int(draw(_FRACTION) * length)


@st.composite
def mutated_line(draw: st.DrawFn, *, ascii_only: bool = False, max_repeat: int = 70_000) -> str:
    """A real line, mutated; `ascii_only` keeps to printable ASCII (where `re` and RE2 agree)."""
    line = draw(st.sampled_from(REAL_LINES))
    for op in draw(_OPS):
        if op == "number":
            runs = list(_DIGITS.finditer(line))
            if runs:
                run = runs[_at(draw, len(runs))]
                value = draw(numbers)
                if ascii_only:
                    value = "".join(ch for ch in value if ch.isascii())
                line = line[:run.start()] + value + line[run.end():]
        elif op == "repeat" and line:
            start = _at(draw, len(line))
            end = start + 1 + _at(draw, len(line) - start)
            # Mostly short repeats; one in ten fills the line (the matcher's cap is 64 KiB).
            size = 1 + _at(draw, 2_000) if _at(draw, 10) else max_repeat
            piece = line[start:end]
            line = line[:start] + (piece * (size // len(piece) + 1))[:size] + line[end:]
        elif op == "prefix":
            line = draw(st.sampled_from(PREFIXES)) + line
        elif op == "splice":
            at = _at(draw, len(line) + 1)
            line = line[:at] + draw(_ASCII_NOISE if ascii_only else _NOISE) + line[at:]
        elif op == "cut" and line:
            line = line[:_at(draw, len(line) + 1)]
    return line


log_lines = st.one_of(mutated_line(), st.text(max_size=300), st.sampled_from(REAL_LINES))
