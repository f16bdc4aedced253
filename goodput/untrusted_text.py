"""Reading job-controlled text at a cost the text cannot choose: linear-time regexes, bounded integers.

Everything a Slurm job prints is an attacker's bytes, and goodput reads it in the worker that also
beats Temporal heartbeats and serves log push. Python's `re` backtracks: one crafted 63 KB log
line held a core, and the GIL, for tens of seconds against the old catalogue. RE2 compiles a
pattern to an automaton, so a search costs at most O(pattern x text) whatever the text says, and
it refuses what an automaton cannot do (backreferences, lookaround): `LinearRegex` turns that
refusal into `LinearPatternError` when the pattern is compiled, at load time, never while matching.
Python's `int()` raises over 4,300 digits and is quadratic below that, so `bounded_int` counts
digits before it converts.

Patterns run over UTF-8 bytes and report byte offsets. The google-re2 extension is called
directly (`re2._re2`, pinned in pyproject.toml): its pure-Python `re` look-alike rebuilds the
group-name table and a generator on every call, five to ten times the cost of the match itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import re2

_RE2: Any = re2._re2
_UNANCHORED = _RE2.RE2.Anchor.UNANCHORED
_ANCHOR_START = _RE2.RE2.Anchor.ANCHOR_START
_ANCHOR_BOTH = _RE2.RE2.Anchor.ANCHOR_BOTH
_NO_SPAN = (-1, -1)
# RE2's default (8 MiB) bounds the DFA cache. Searching for many literals needs about one DFA
# state per trie node; a larger budget keeps a few thousand literal characters from running out
# (a set has no slower fallback: out of memory, it would report nothing).
_LITERALS_MAX_MEM = 64 << 20

MAX_INT_DIGITS = 18
"""Every count, id, code, rank and timestamp goodput reads fits in 18 digits (below 2**63)."""


class LinearPatternError(ValueError):
    """A pattern RE2 cannot run in linear time (or cannot parse); raised when it is compiled."""


def utf8(text: str) -> bytes:
    """The bytes patterns run over; a lone surrogate (valid in JSON, not in UTF-8) becomes `?`."""
    return text.encode("utf-8", "replace")


def _options(*, ignore_case: bool = False, max_mem: int = 0) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our error to report, not absl's stderr line
    options.case_sensitive = not ignore_case
    if max_mem:
        options.max_mem = max_mem
    return options


class Found:
    """One match: byte spans into the searched bytes, groups decoded on demand."""

    __slots__ = ("_data", "_names", "_spans")

    def __init__(self, data: bytes, spans: list[tuple[int, int]], names: dict[str, int]) -> None:
        self._data = data
        self._spans = spans
        self._names = names

    def _index(self, group: int | str) -> int:
        return self._names[group] if isinstance(group, str) else group

    def start(self, group: int | str = 0) -> int:
        return self._spans[self._index(group)][0]

    def end(self, group: int | str = 0) -> int:
        return self._spans[self._index(group)][1]

    def group(self, group: int | str = 0) -> str | None:
        """The group's text, or None when it did not take part in the match."""
        start, end = self._spans[self._index(group)]
        if start < 0:
            return None
        return self._data[start:end].decode("utf-8", "replace")

    def __getitem__(self, group: int | str) -> str | None:
        return self.group(group)

    def groupdict(self) -> dict[str, str]:
        """Named groups that took part in the match (the others are left out, not None)."""
        out: dict[str, str] = {}
        for name, index in self._names.items():
            start, end = self._spans[index]
            if start >= 0:
                out[name] = self._data[start:end].decode("utf-8", "replace")
        return out


class LinearRegex:
    """A compiled RE2 pattern. Searches take UTF-8 bytes (`utf8(text)`); `*_text` take a str."""

    __slots__ = ("_names", "_rx", "ignore_case", "pattern")

    def __init__(self, pattern: str, *, ignore_case: bool = False, max_mem: int = 0) -> None:
        self.pattern = pattern
        self.ignore_case = ignore_case
        try:
            rx = _RE2.RE2(utf8(pattern), _options(ignore_case=ignore_case, max_mem=max_mem))
        except Exception as exc:  # the extension raises its own error type for some refusals
            raise LinearPatternError(f"not a linear-time pattern: {exc}: {pattern[:120]!r}") from None
        if not rx.ok():
            reason = bytes(rx.error()).decode("utf-8", "replace")
            raise LinearPatternError(f"not a linear-time pattern: {reason}: {pattern[:120]!r}")
        self._rx = rx
        self._names: dict[str, int] = {bytes(name).decode(): int(index)
                                       for name, index in rx.NamedCapturingGroups()}

    @property
    def group_names(self) -> frozenset[str]:
        return frozenset(self._names)

    # The *_spans methods skip building a `Found`: the catalogue calls them a few times per log line.

    def search_spans(self, data: bytes, pos: int = 0) -> list[tuple[int, int]] | None:
        """`search`'s byte spans, group 0 first, (-1, -1) for a group that took no part."""
        spans: list[tuple[int, int]] = self._rx.Match(_UNANCHORED, data, pos, len(data))
        return None if spans[0] == _NO_SPAN else spans

    def match_spans(self, data: bytes, pos: int = 0) -> list[tuple[int, int]] | None:
        spans: list[tuple[int, int]] = self._rx.Match(_ANCHOR_START, data, pos, len(data))
        return None if spans[0] == _NO_SPAN else spans

    def groups_of(self, data: bytes, spans: list[tuple[int, int]]) -> dict[str, str]:
        """The named groups of a match (from `*_spans`) that took part in it, decoded."""
        return {name: data[spans[i][0]:spans[i][1]].decode("utf-8", "replace")
                for name, i in self._names.items() if spans[i][0] >= 0}

    def _found(self, anchor: Any, data: bytes, pos: int) -> Found | None:
        spans: list[tuple[int, int]] = self._rx.Match(anchor, data, pos, len(data))
        return None if spans[0] == _NO_SPAN else Found(data, spans, self._names)

    def search(self, data: bytes, pos: int = 0) -> Found | None:
        """The leftmost match at or after byte `pos` (`^` and `\\b` still see the bytes before it)."""
        return self._found(_UNANCHORED, data, pos)

    def match(self, data: bytes, pos: int = 0) -> Found | None:
        """A match that starts exactly at byte `pos`."""
        return self._found(_ANCHOR_START, data, pos)

    def fullmatch(self, data: bytes) -> Found | None:
        return self._found(_ANCHOR_BOTH, data, 0)

    def search_text(self, text: str) -> Found | None:
        return self.search(utf8(text))

    def match_text(self, text: str) -> Found | None:
        return self.match(utf8(text))

    def __repr__(self) -> str:
        return f"LinearRegex({self.pattern!r}, ignore_case={self.ignore_case})"


def quote(literal: str) -> str:
    """`literal` as a pattern that matches exactly it."""
    return bytes(_RE2.RE2.QuoteMeta(utf8(literal))).decode("utf-8")


class LiteralSet:
    """Which of many literal strings occur in a text: one automaton pass, however many literals."""

    __slots__ = ("_set", "literals")

    def __init__(self, literals: Sequence[str]) -> None:
        if not literals or any(not lit for lit in literals):
            raise LinearPatternError("a literal set needs at least one literal and no empty one")
        self.literals = tuple(literals)
        found = re2.Set.SearchSet(_options(max_mem=_LITERALS_MAX_MEM))
        for literal in self.literals:
            found.Add(quote(literal))
        found.Compile()
        self._set = found

    def present(self, data: bytes) -> list[int]:
        """Indices (into `literals`) of those occurring in `data`, in no particular order."""
        hits: list[int] | None = self._set.Match(data)
        return hits or []


class PatternSet:
    """Which of many patterns match a text: one automaton pass, however many patterns.

    An empty answer is not proof: RE2 reports nothing when the set's automaton runs out of memory,
    so a caller must treat an empty answer as "unknown" and try the patterns one by one.
    """

    __slots__ = ("_set", "size")

    def __init__(self, patterns: Sequence[str]) -> None:
        if not patterns:
            raise LinearPatternError("a pattern set needs at least one pattern")
        found = re2.Set.SearchSet(_options(max_mem=_LITERALS_MAX_MEM))
        for pattern in patterns:
            try:
                added = found.Add(pattern)
            except _RE2.Error as exc:
                raise LinearPatternError(f"pattern does not compile: {pattern[:80]!r}") from exc
            if added < 0:
                raise LinearPatternError(f"pattern does not compile: {pattern[:80]!r}")
        found.Compile()
        self._set = found
        self.size = len(patterns)

    def matching(self, data: bytes) -> list[int]:
        """Indices of the patterns that match somewhere in `data`; empty when none (or unknown)."""
        hits: list[int] | None = self._set.Match(data)
        return hits or []


def any_of(literals: Sequence[str]) -> LinearRegex:
    """One pattern matching any of the literals; `search` then says where the first one is."""
    return LinearRegex("|".join(quote(lit) for lit in literals), max_mem=_LITERALS_MAX_MEM)


def bounded_int(text: str | None, *, max_digits: int = MAX_INT_DIGITS, signed: bool = False) -> int | None:
    """ASCII decimal digits (a leading `-` when `signed`) as an int; None when absent, not a
    number, or longer than `max_digits` digits, so no input can make the conversion raise or crawl."""
    if not text:
        return None
    digits = text[1:] if signed and text[0] == "-" else text
    if not 0 < len(digits) <= max_digits or not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)
