"""The matcher: linear time for any line, by construction, and cheap for the clean majority.

Every pattern runs on RE2 (`goodput.untrusted_text`), an automaton engine: no line, however
crafted, makes a search backtrack, so the worker's heartbeats and the push server never wait on a
log line. The loader refuses a pattern RE2 cannot run, so nothing else can reach this module.

Training logs are mostly clean lines (loss, throughput, NCCL INFO), often millions of them.
`scan` joins a few hundred lines and searches them once for any signature literal; only a line
holding one goes further. `scan_blocks` does the same over a file read as bytes, 32 KiB of whole
lines at a time, and decodes only the lines that hold a literal: most of a log is never decoded,
split into lines or encoded again. There one RE2 set names every literal present, which names the
candidate signatures, and only their regexes run (on the line without its launcher prefixes).
Lines are capped before any regex sees them, so a 2 MB line of base64 or binary garbage costs the
same as a 64 KiB one. A literal many signatures share (`Xid`, one signature per Xid of NVIDIA's
catalogue) has one RE2 set of their patterns: a line holding it is searched once for all of them,
and only the regexes that matched run again for their groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from goodput.diagnose.signatures.model import LineContext, Match, Signature
from goodput.diagnose.signatures.prefixes import RepeatedPrefix, split_prefix_bytes
from goodput.untrusted_text import LinearRegex, LiteralSet, PatternSet, any_of, utf8

MAX_SCAN_CHARS = 64 * 1024
# `scan` searches up to this many lines at once (enough to amortise the cost of one search), and
# sizes each batch from the previous one's line lengths to hold about `_BATCH_CHARS` characters,
# so a log of 64 KiB lines is read a few lines at a time and memory stays flat.
_BATCH_LINES = 256
_BATCH_CHARS = 1 << 20
# `scan_blocks` searches a read log this many bytes at a time (whole lines; a longer line alone),
# about the text path's batch of 256 lines of progress output; the chunk is also the span whose
# repeated line prefixes may name a host.
_CHUNK_BYTES = 32 * 1024
# Candidate lists remembered per combination of literals found in a line.
_MAX_COMBINATIONS = 4096
# A literal shared by this many signatures (`Xid`: one signature per Xid of NVIDIA's catalogue) gets
# one RE2 set of their patterns, so a line holding it costs one automaton pass, not one per signature.
_SET_FROM = 8


class Catalogue:
    """An immutable, versioned set of signatures with a matcher built for them."""

    def __init__(self, signatures: Sequence[Signature], version: int = 1, *,
                 derived: Sequence[Signature] = ()) -> None:
        """`derived`: signatures the verdict builder writes from several lines (no line matches
        them): known to `get`, never matched."""
        self.version = version
        self.signatures: tuple[Signature, ...] = tuple(signatures)
        self._by_id = {s.id: s for s in self.signatures}
        if len(self._by_id) != len(self.signatures):
            raise ValueError("duplicate signature ids")
        clash = sorted({s.id for s in derived} & self._by_id.keys())
        if clash:
            raise ValueError(f"derived signatures reuse catalogue ids {clash}")
        self._derived = {s.id: s for s in derived}
        unknown = sorted({i for s in self.signatures for i in s.supersedes} - self._by_id.keys())
        if unknown:
            raise ValueError(f"supersedes names unknown signature ids {unknown}")
        order = {s.id: i for i, s in enumerate(self.signatures)}
        by_literal: dict[str, list[Signature]] = {}
        for sig in self.signatures:
            for lit in sig.literals:
                by_literal.setdefault(lit, []).append(sig)
        literals = sorted(by_literal)
        self._sigs_of: tuple[tuple[Signature, ...], ...] = tuple(tuple(by_literal[lit]) for lit in literals)
        self._order = order
        self._combined: dict[frozenset[int], tuple[Signature, ...]] = {}
        self._literals: LiteralSet | None = LiteralSet(literals) if literals else None
        # For a crowded literal: the set of its (case-sensitive) signatures' patterns, and their ids.
        self._sets: dict[int, tuple[PatternSet, tuple[str, ...]]] = {}
        for index, sigs in enumerate(self._sigs_of):
            exact = [s for s in sigs if not s.ignore_case]
            if len(exact) >= _SET_FROM:
                self._sets[index] = (PatternSet([s.pattern for s in exact]), tuple(s.id for s in exact))
        self._first_literal: LinearRegex | None = any_of(literals) if literals else None

    def __contains__(self, signature_id: object) -> bool:
        return signature_id in self._by_id or signature_id in self._derived

    def __len__(self) -> int:
        return len(self.signatures)

    def get(self, signature_id: str) -> Signature | None:
        return self._by_id.get(signature_id) or self._derived.get(signature_id)

    def might_match(self, line: str) -> bool:
        """The prefilter alone: False means no signature can match this line."""
        return self._first_literal is not None and self._first_literal.search(utf8(line[:MAX_SCAN_CHARS])) is not None

    def candidates(self, data: bytes) -> tuple[Signature, ...]:
        """Signatures with a literal in `data`, in catalogue order: the only ones that can match."""
        if self._literals is None:
            return ()
        return self._candidates(self._literals.present(data))

    def _candidates(self, present: list[int]) -> tuple[Signature, ...]:
        if len(present) <= 1:
            return self._sigs_of[present[0]] if present else ()
        key = frozenset(present)
        found = self._combined.get(key)
        if found is None:
            unique = {sig.id: sig for index in present for sig in self._sigs_of[index]}
            found = tuple(sorted(unique.values(), key=lambda s: self._order[s.id]))
            if len(self._combined) < _MAX_COMBINATIONS:  # bounded whatever lines arrive
                self._combined[key] = found
        return found

    def match_line(self, line: str, line_no: int = 0, layout: RepeatedPrefix | None = None) -> list[Match]:
        """Every signature that matches one line, specific rules displacing generic ones and fallbacks.
        `layout`: the prefixes the line's chunk repeats, for a host no known prefix names."""
        if len(line) > MAX_SCAN_CHARS:
            line = line[:MAX_SCAN_CHARS]
        return self._match_data(line, utf8(line), line_no, layout)

    def _match_data(self, line: str, data: bytes, line_no: int, layout: RepeatedPrefix | None) -> list[Match]:
        """`match_line` for a line (at most `MAX_SCAN_CHARS`) whose UTF-8 bytes are `data`."""
        if self._literals is None:
            return []
        present = self._literals.present(data)
        candidates = self._candidates(present)
        if not candidates:
            return []
        context, offset = split_prefix_bytes(data)
        if layout is not None and context.host is None and (inferred := layout.host(data, offset)) is not None:
            context = LineContext(host=inferred[0], rank=context.rank, task=context.task)
            offset = inferred[1]
        body = data[offset:] if offset else data
        ruled_out = self._ruled_out(present, body)
        hits: list[Match] = []
        for sig in candidates:
            if sig.id in ruled_out:
                continue
            regex = sig.regex
            spans = regex.search_spans(body)
            if spans is not None:
                hits.append(Match(signature=sig, line_no=line_no, text=line, groups=regex.groups_of(body, spans),
                                  context=context))
        if len(hits) > 1:
            lowest = min(h.signature.tier for h in hits)
            hits = [h for h in hits if h.signature.tier == lowest]
            displaced = {i for h in hits for i in h.signature.supersedes}
            if displaced:
                hits = [h for h in hits if h.signature.id not in displaced]
        return hits

    def _ruled_out(self, present: list[int], body: bytes) -> set[str]:
        """Ids of signatures a pattern set proved cannot match `body` (its literals' crowded ones)."""
        out: set[str] = set()
        for index in present:
            entry = self._sets.get(index)
            if entry is None:
                continue
            pattern_set, ids = entry
            matching = pattern_set.matching(body)
            if matching:  # empty may mean the automaton ran out of memory: then try them one by one
                keep = {ids[i] for i in matching}
                out.update(i for i in ids if i not in keep)
        return out

    def scan(self, lines: Iterable[str], start: int = 1) -> Iterator[Match]:
        """Stream matches over lines numbered from `start`; memory stays flat for any input."""
        if self._first_literal is None:
            return
        for batch, text, first in batches(lines, start):
            yield from self._scan_batch(batch, text, first)

    def scan_blocks(self, blocks: Iterable[bytes], start: int = 1) -> Iterator[Match]:
        """`scan` over a log read as bytes: each block is whole lines joined by newlines (no final
        newline), as `goodput.diagnose.classify` reads a file. Only a line that holds a literal is
        decoded (invalid UTF-8 replaced, a trailing CR dropped, as the text reader does); the rest of
        the log is searched as the bytes it was read as, never decoded, split or encoded again."""
        if self._first_literal is None:
            return
        first = start
        for block in blocks:
            pos, end = 0, len(block)
            while True:
                cut = end if end - pos <= _CHUNK_BYTES else block.rfind(b"\n", pos, pos + _CHUNK_BYTES + 1)
                if cut < pos:  # one line longer than a chunk: it is a chunk of its own
                    cut = block.find(b"\n", pos + _CHUNK_BYTES)
                    cut = end if cut < 0 else cut
                chunk = block[pos:cut]
                if len(chunk) > MAX_SCAN_CHARS:  # a line may be over the cap: the text path cuts it
                    # cut as the text reader cuts a line (4 bytes per character at most), then decoded
                    batch = [_decoded(line[:4 * MAX_SCAN_CHARS]) for line in chunk.split(b"\n")]
                    yield from self.scan(batch, first)
                    first += len(batch)
                else:
                    yield from self._scan_chunk(chunk, first)
                    first += chunk.count(b"\n") + 1
                if cut >= end:
                    break
                pos = cut + 1

    def _scan_chunk(self, chunk: bytes, first: int) -> Iterator[Match]:
        """`_scan_batch` for whole lines as read (no line over the cap), decoding only hit lines."""
        layout = RepeatedPrefix(chunk)
        for index, raw in self._hit_lines(chunk):
            line = _decoded(raw)
            # The bytes the text path would match: the line decoded and encoded again (the same bytes
            # when the line is valid UTF-8 and has no trailing CR).
            data = raw if raw.isascii() and not raw.endswith(b"\r") else utf8(line)
            yield from self._match_data(line, data, first + index, layout)

    def _scan_batch(self, batch: list[str], text: str, first: int) -> Iterator[Match]:
        """One search over the batch joined by newlines finds the next line holding a literal."""
        data = utf8(text)
        # Counted on the bytes (one memchr pass), the same count as on the text: a newline is one byte.
        if data.count(b"\n") != len(batch) - 1:  # a line with a newline inside: judge lines one by one
            for index, line in enumerate(batch):
                yield from self.match_line(line, first + index)
            return
        layout = RepeatedPrefix(data)
        # The line's bytes are already in the batch: no second encoding of the hit line.
        for index, raw in self._hit_lines(data):
            yield from self._match_data(batch[index], raw, first + index, layout)

    def _hit_lines(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Each line of newline-joined `data` that holds a literal: its index and its bytes. One
        search over the whole of `data` finds the next such line."""
        assert self._first_literal is not None
        find = self._first_literal.search
        index, pos = 0, 0  # the line `index` starts at byte `pos`
        while (found := find(data, pos)) is not None:
            hit_at = found.start()
            newlines = data.count(b"\n", pos, hit_at)
            if newlines:
                index += newlines
                pos = data.rfind(b"\n", pos, hit_at) + 1
            line_end = data.find(b"\n", found.end())  # literals hold no newline (the loader checks)
            yield index, data[pos:line_end if line_end >= 0 else len(data)]
            if line_end < 0:
                return
            index += 1
            pos = line_end + 1


def batches(lines: Iterable[str], start: int = 1) -> Iterator[tuple[list[str], str, int]]:
    """How `Catalogue.scan` cuts lines into batches: (lines, lines joined by newlines, number of the
    first), each line capped; a batch is also the chunk whose repeated prefixes may name a host."""
    it = iter(lines)
    first, size = start, 16
    while batch := list(islice(it, size)):
        text = "\n".join(batch)
        # No line can be over the cap when the whole batch is not (the common case: no `max`).
        if len(text) > MAX_SCAN_CHARS and max(map(len, batch)) > MAX_SCAN_CHARS:
            batch = [line[:MAX_SCAN_CHARS] for line in batch]
            text = "\n".join(batch)
        yield batch, text, first
        first += len(batch)
        size = max(1, min(_BATCH_LINES, _BATCH_CHARS * len(batch) // (len(text) + 1)))


def _decoded(raw: bytes) -> str:
    """A line as the text reader decodes it: invalid UTF-8 replaced, trailing CRs dropped."""
    return raw.decode("utf-8", errors="replace").rstrip("\r")
