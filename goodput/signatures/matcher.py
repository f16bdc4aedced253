"""The fast matcher: one cheap prefilter, then only the rules that can possibly match.

Training logs are mostly clean lines (loss, throughput, NCCL INFO), often millions of them. A clean
line costs one search of a single trie-shaped regex built from the rules' literal substrings; only
a line that passes is split into prefix and body and given to the regexes of the rules whose
literals it contains. Lines are capped before any regex sees them, so a 2 MB line of base64 or
binary garbage costs the same as a 64 KiB one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from goodput.signatures.model import Match, Signature
from goodput.signatures.prefixes import split_prefix

MAX_SCAN_CHARS = 64 * 1024


# Characters ordered from most to least frequent in training logs (lower-case prose, numbers, the
# punctuation of metric lines); anything not listed (most capitals, rare symbols) is rarer still.
_COMMON = " e0t1a2o3i4n5s6r7:8l9.|cdum-_/hpg,=[]()fwybvkxjqzIENSO"
_RANK = {ch: len(_COMMON) - i for i, ch in enumerate(_COMMON)}
MIN_ANCHOR = 4


def anchor(literal: str) -> str:
    """The part of a literal the prefilter looks for: its tail from the rarest character on.

    Any substring of a literal is a correct prefilter for it (it occurs wherever the literal does).
    The regex engine only starts matching at positions holding one of the anchors' first characters,
    so anchors that start with a capital or a rare symbol let it skip most of a clean line unread;
    keeping the rest of the literal keeps the prefilter as selective as the literal itself.
    """
    if len(literal) <= MIN_ANCHOR:
        return literal
    starts = range(len(literal) - MIN_ANCHOR + 1)
    return literal[min(starts, key=lambda i: (_RANK.get(literal[i], 0), i)):]


def trie_pattern(literals: Iterable[str]) -> str:
    """One regex for "any of these substrings", factored as a trie.

    CPython's regex engine tries the alternatives of a flat `a|b|c` one by one at every position;
    sharing prefixes lets it reject a position after one or two characters (about 3x faster).
    """
    trie: dict[str, dict[str, Any]] = {}
    for word in literals:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a literal ends here: for a prefilter, the shorter match is enough
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(trie)


class Catalogue:
    """An immutable, versioned set of signatures with a matcher built for them."""

    def __init__(self, signatures: Sequence[Signature], version: int = 1) -> None:
        self.version = version
        self.signatures: tuple[Signature, ...] = tuple(signatures)
        self._by_id = {s.id: s for s in self.signatures}
        if len(self._by_id) != len(self.signatures):
            raise ValueError("duplicate signature ids")
        by_literal: dict[str, list[Signature]] = {}
        for sig in self.signatures:
            for lit in sig.literals:
                by_literal.setdefault(lit, []).append(sig)
        literals = sorted(by_literal)
        self._literals: tuple[tuple[str, tuple[Signature, ...]], ...] = tuple(
            (lit, tuple(by_literal[lit])) for lit in literals)
        anchors = sorted({anchor(lit) for lit in literals})
        self._prefilter = re.compile(trie_pattern(anchors)) if anchors else None
        # On a line that passed, a zero-width lookahead finds every anchor occurrence (overlaps
        # included); the trie reports the shortest anchor at a position, so each anchor maps to
        # the literals whose anchors extend it.
        self._anchors_at = re.compile(f"(?=({trie_pattern(anchors)}))") if anchors else None
        self._by_anchor: dict[str, tuple[tuple[str, tuple[Signature, ...]], ...]] = {
            a: tuple((lit, sigs) for lit, sigs in self._literals if anchor(lit).startswith(a))
            for a in anchors}

    def __contains__(self, signature_id: object) -> bool:
        return signature_id in self._by_id

    def __len__(self) -> int:
        return len(self.signatures)

    def get(self, signature_id: str) -> Signature | None:
        return self._by_id.get(signature_id)

    def might_match(self, line: str) -> bool:
        """The prefilter alone: False means no signature can match this line."""
        return self._prefilter is not None and self._prefilter.search(line[:MAX_SCAN_CHARS]) is not None

    def match_line(self, line: str, line_no: int = 0) -> list[Match]:
        """Every signature that matches one line, specific rules displacing generic ones."""
        if len(line) > MAX_SCAN_CHARS:
            line = line[:MAX_SCAN_CHARS]
        if self._prefilter is None or self._anchors_at is None or self._prefilter.search(line) is None:
            return []
        candidates: dict[str, Signature] = {}
        seen: set[str] = set()
        for found in self._anchors_at.finditer(line):
            a = found.group(1)
            if a in seen:
                continue
            seen.add(a)
            for lit, sigs in self._by_anchor[a]:
                if lit in line:
                    for sig in sigs:
                        candidates.setdefault(sig.id, sig)
        context, body = split_prefix(line)
        hits: list[Match] = []
        for sig in candidates.values():
            m = sig.regex.search(body)
            if m is None:
                continue
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            hits.append(Match(signature=sig, line_no=line_no, text=line, groups=groups, context=context))
        if len(hits) > 1 and any(not h.signature.generic for h in hits):
            hits = [h for h in hits if not h.signature.generic]
        return hits

    def scan(self, lines: Iterable[str], start: int = 1) -> Iterator[Match]:
        """Stream matches over lines numbered from `start`; memory stays flat for any input."""
        prefilter = self._prefilter
        if prefilter is None:
            return
        search = prefilter.search
        for line_no, line in enumerate(lines, start):
            if len(line) > MAX_SCAN_CHARS:
                line = line[:MAX_SCAN_CHARS]
            if search(line) is None:
                continue
            yield from self.match_line(line, line_no)
