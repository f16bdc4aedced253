"""Slurm hostlist expressions (`node[1-3,5]`, `gpu-[01-02]-ib[1-2]`) to and from node names.

Slurm prints compressed hostlists everywhere (NodeList=, ExcNodeList=, squeue's `nodes`), and
goodput needs the individual names to drain, exclude and attribute. Doing it in Python avoids a
`scontrol show hostnames` round trip per job (and over SSH, a second connection).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_EXPANDED = 100_000

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A hostlist expression Slurm would not print (unbalanced brackets, reversed ranges...)."""


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(f"bad range {item!r} in hostlist")
        lo, hi = match.group(1), match.group(2)
        if hi is None:
            values.append(lo)
            continue
        start, end = int(lo), int(hi)
        if end < start:
            raise HostlistError(f"reversed range {item!r} in hostlist")
        if end - start + 1 > MAX_EXPANDED:
            raise HostlistError(f"range {item!r} is too large")
        width = len(lo) if lo.startswith("0") else 0  # Slurm keeps zero padding: [01-10]
        values.extend(str(n).zfill(width) for n in range(start, end + 1))
    return values


def _expand_one(pattern: str) -> list[str]:
    start = pattern.find("[")
    if start < 0:
        return [pattern]
    end = pattern.index("]", start)
    prefix, body, rest = pattern[:start], pattern[start + 1:end], pattern[end + 1:]
    tails = _expand_one(rest)
    names = [f"{prefix}{value}{tail}" for value in _expand_ranges(body) for tail in tails]
    if len(names) > MAX_EXPANDED:
        raise HostlistError("hostlist expands to too many names")
    return names


def expand_hostlist(expr: str | None) -> tuple[str, ...]:
    """`node[1-3,5],login1` -> ('node1', 'node2', 'node3', 'node5', 'login1'); '' and '(null)' -> ()."""
    if expr is None:
        return ()
    expr = expr.strip()
    if expr in ("", "(null)", "None", "N/A"):
        return ()
    names: list[str] = []
    for part in _split_top_level(expr):
        names.extend(_expand_one(part))
        if len(names) > MAX_EXPANDED:
            raise HostlistError("hostlist expands to too many names")
    return tuple(dict.fromkeys(names))


def compress_hostlist(names: Iterable[str]) -> str:
    """The inverse, for readable argv: ('node1', 'node2', 'node4') -> 'node[1-2,4]'.

    Only a trailing number is compressed, keeping the first-seen order of prefixes; names
    without a trailing number stay as they are. `expand_hostlist(compress_hostlist(x))` gives
    the same set of names back.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        match = _TRAILING_NUMBER.match(name)
        if not match:
            plain.append(name)
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
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
