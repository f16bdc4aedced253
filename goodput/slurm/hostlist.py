"""Slurm hostlist expressions (`node[1-3,5]`, `gpu-[01-02]-ib[1-2]`) to and from node names.

Slurm prints compressed hostlists everywhere (NodeList=, ExcNodeList=, squeue's `nodes`), and
goodput needs the individual names to drain, exclude and attribute. Doing it in Python avoids a
`scontrol show hostnames` round trip per job (and over SSH, a second connection).

A hostlist is a few bytes that can stand for billions of names (`a[1-99999]b[1-99999]`), and
some of the text that reaches this module passed through job-controlled output. So an expression
is parsed first, its size is computed from the ranges (a product of range sizes, stopping at the
limit), and only an expression whose names fit the limits is expanded, iteratively: the length of
the expression, the number of names, the length of each name and the digits of each number are
all bounded, and anything outside them is a HostlistError, never a MemoryError or RecursionError.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_EXPANDED = 100_000
MAX_EXPRESSION = 256 * 1024
MAX_NAME = 128  # the longest node name goodput accepts anywhere (identifiers.MAX_NAME)
MAX_DIGITS = 18  # fits an int64; Slurm's own host ranges are far shorter

# Both patterns only ever see inputs whose length was bounded first.
_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")
_TRAILING_NUMBER = re.compile(r"(.*?)([0-9]+)")
_DELIMITER = re.compile(r"[\[\],]")  # one character class: linear on any input
_NULLS = frozenset({"", "(null)", "None", "N/A"})


class HostlistError(ValueError):
    """A hostlist expression Slurm would not print (unbalanced brackets, reversed ranges...)
    or one that stands for more names than goodput will handle."""


@dataclass(frozen=True)
class _Range:
    start: int
    end: int
    width: int  # zero padding, as Slurm keeps it: [01-10]

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    @property
    def longest(self) -> int:
        return max(len(str(self.end)), self.width)


# A part of a hostlist (between top-level commas): literal text and bracketed range sets.
_Segment = str | tuple[_Range, ...]


def _show(expr: str) -> str:
    return repr(expr[:60] + ("..." if len(expr) > 60 else ""))


def _parse_ranges(body: str, expr: str) -> tuple[_Range, ...]:
    ranges: list[_Range] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item) if len(item) <= 2 * MAX_DIGITS + 1 else None
        if match is None:
            raise HostlistError(f"bad range {item[:40]!r} in hostlist {_show(expr)}")
        lo, hi = match.group(1), match.group(2)
        start = int(lo)
        end = int(hi) if hi is not None else start
        if end < start:
            raise HostlistError(f"reversed range {item!r} in hostlist {_show(expr)}")
        ranges.append(_Range(start, end, len(lo) if lo.startswith("0") else 0))
    return tuple(ranges)


def _parse(expr: str) -> list[list[_Segment]]:
    """Top-level parts, each a list of segments; one pass over the delimiters, no recursion."""
    parts: list[list[_Segment]] = []
    segments: list[_Segment] = []
    position = 0  # start of the text not yet consumed
    opened = -1  # index of the '[' whose ']' is awaited
    for match in _DELIMITER.finditer(expr):
        index, char = match.start(), match.group()
        if opened >= 0:
            if char == "[":
                raise HostlistError(f"nested brackets in hostlist {_show(expr)}")
            if char == "]":
                segments.append(_parse_ranges(expr[opened + 1:index], expr))
                opened, position = -1, index + 1
            continue
        if char == "]":
            raise HostlistError(f"unbalanced ']' in hostlist {_show(expr)}")
        if index > position:
            segments.append(expr[position:index])
        if char == "[":
            opened = index
        else:
            parts.append(segments)
            segments = []
        position = index + 1
    if opened >= 0:
        raise HostlistError(f"unbalanced '[' in hostlist {_show(expr)}")
    if position < len(expr):
        segments.append(expr[position:])
    parts.append(segments)
    return [p for p in parts if p]


def _part_size(segments: list[_Segment], limit: int) -> int:
    """Names in one part: the product of its bracket sizes, stopping as soon as it passes limit."""
    count = 1
    for segment in segments:
        if isinstance(segment, tuple):
            count *= sum(r.size for r in segment)
            if count > limit:
                return limit + 1
    return count


def _longest_name(segments: list[_Segment]) -> int:
    return sum(len(s) if isinstance(s, str) else max(r.longest for r in s) for s in segments)


def _checked(expr: str | None) -> list[list[_Segment]]:
    if expr is None:
        return []
    if not isinstance(expr, str):
        raise HostlistError(f"a hostlist must be text, not {type(expr).__name__}")
    if len(expr) > MAX_EXPRESSION:
        raise HostlistError(f"hostlist of {len(expr)} characters (limit {MAX_EXPRESSION})")
    expr = expr.strip()
    if expr in _NULLS:
        return []
    if any(not ch.isprintable() or ch.isspace() for ch in expr):
        raise HostlistError(f"whitespace or control characters in hostlist {_show(expr)}")
    parts = _parse(expr)
    total = 0
    for segments in parts:
        if _longest_name(segments) > MAX_NAME:
            raise HostlistError(f"hostlist {_show(expr)} has names over {MAX_NAME} characters")
        total += _part_size(segments, MAX_EXPANDED)
        if total > MAX_EXPANDED:
            raise HostlistError(f"hostlist {_show(expr)} stands for more than {MAX_EXPANDED} names")
    return parts


def hostlist_size(expr: str | None) -> int:
    """How many names `expr` stands for (duplicates counted), without expanding it.

    Raises HostlistError for a malformed expression or one over the limits.
    """
    return sum(_part_size(segments, MAX_EXPANDED) for segments in _checked(expr))


def _values(ranges: tuple[_Range, ...]) -> list[str]:
    return [str(n).zfill(r.width) for r in ranges for n in range(r.start, r.end + 1)]


def expand_hostlist(expr: str | None) -> tuple[str, ...]:
    """`node[1-3,5],login1` -> ('node1', 'node2', 'node3', 'node5', 'login1'); '' and '(null)' -> ()."""
    names: dict[str, None] = {}
    for segments in _checked(expr):
        choices = [[s] if isinstance(s, str) else _values(s) for s in segments]
        for pieces in itertools.product(*choices):
            names["".join(pieces)] = None
    return tuple(names)


def compress_hostlist(names: Iterable[str]) -> str:
    """The inverse, for readable argv: ('node1', 'node2', 'node4') -> 'node[1-2,4]'.

    Only a trailing number (up to MAX_DIGITS digits) is compressed, keeping the first-seen
    order of prefixes; other names stay as they are. `expand_hostlist(compress_hostlist(x))`
    gives the same set of names back for valid node names.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        match = _TRAILING_NUMBER.fullmatch(name) if len(name) <= MAX_NAME else None
        if not match or len(match.group(2)) > MAX_DIGITS:
            order.append(name)
            continue
        digits = match.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (match.group(1), width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    out: list[str] = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        numbers = sorted(set(groups[item]))
        if len(numbers) == 1:
            out.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        out.append(f"{prefix}[{','.join(_runs(numbers, width))}]")
    return ",".join(out)


def _runs(numbers: list[int], width: int) -> list[str]:
    ranges: list[str] = []
    run_start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(run_start).zfill(width), str(prev).zfill(width)
        ranges.append(lo if run_start == prev else f"{lo}-{hi}")
        if n is not None:
            run_start = prev = n
    return ranges
