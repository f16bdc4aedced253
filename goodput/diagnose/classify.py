"""`goodput classify`: run the signature catalogue over logs and say what failed and who is to blame.

The live service's log watcher (`goodput.detect.live`) matches the same catalogue line by line
and weighs its hits with the same `VerdictBuilder`, so a post-mortem reads a log by the rules the
service used. Both may infer a host that no known prefix names from the prefixes a stretch of the
log repeats: here a file's piece of about 32 KiB, there the lines one poll read (about as much at
a time, and never for a one-node job, whose node is known). A stretch cut elsewhere can repeat a
prefix fewer times, so on such a host alone the two may differ. Files are read as bytes in bounded
pieces: any size, any encoding, any line length. Only the lines that hold a catalogue literal are
decoded, and undecodable bytes become U+FFFD and never stop the scan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import chain
from typing import BinaryIO, TextIO

from goodput.diagnose.signatures import MAX_SCAN_CHARS, Catalogue, Match, default_catalogue
from goodput.diagnose.signatures.verdict import Evidence, Verdict, VerdictBuilder
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, CulpritKind

__all__ = ["Evidence", "Verdict", "anomaly_from_verdict", "classify_file", "classify_lines",
           "iter_lines", "run_classify", "verdict_json"]

# Reading more than this of one line is pointless: the matcher only looks at the first 64 KiB.
_READ_CAP = MAX_SCAN_CHARS * 4  # bytes; UTF-8 can take up to 4 bytes per character
# Bytes read at once: many lines per read, and memory stays within a few blocks for any input.
_BLOCK = 1 << 20


def classify_lines(lines: Iterable[str], catalogue: Catalogue | None = None) -> Verdict:
    """The verdict for one log, given as lines (numbered from 1)."""
    cat = catalogue or default_catalogue()
    return _verdict(cat, cat.scan(lines))


def _verdict(cat: Catalogue, matches: Iterable[Match]) -> Verdict:
    builder = VerdictBuilder(cat.version, mismatch=cat.get("nccl-collective-mismatch"))
    return builder.add_all(matches).build()


def iter_lines(stream: BinaryIO) -> Iterator[str]:
    """Decoded lines of a binary stream; the tail of an over-long line is skipped, not buffered.

    Reads blocks, not lines: one `decode` and one `split` per block cost far less than a
    `readline` and a `decode` per line, the reader's main cost on a log of millions of short lines
    (and chaining the blocks' lists runs in C, no Python frame per line). A newline byte never
    belongs to a multi-byte UTF-8 sequence, so decoding a block of whole lines gives exactly the
    characters that decoding them one by one gives."""
    return chain.from_iterable(_blocks_of_lines(stream))


def _blocks_of_lines(stream: BinaryIO) -> Iterator[list[str]]:
    return map(_decode_block, _byte_blocks(stream))


def _byte_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """The stream as blocks of whole lines joined by newlines (no final newline), each line cut to
    `_READ_CAP` bytes, the tail of an over-long line skipped: what `iter_lines` decodes."""
    pending = b""
    while True:
        block = stream.read(_BLOCK)
        data = pending + block if pending else block
        cut = data.rfind(b"\n")
        if cut >= 0:
            yield data[:cut]
            data = data[cut + 1:]
        # `data` is now the start of one line, without its newline
        if not block:
            if data:
                yield data[:_READ_CAP]
            return
        if len(data) >= _READ_CAP:
            yield data[:_READ_CAP]
            data = _skip_to_next_line(stream)
        pending = data


def _decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _decode_block(raw: bytes) -> list[str]:
    """Whole lines joined by newlines, decoded; an over-long one cut to `_READ_CAP` bytes."""
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    # A line of at most `_READ_CAP // 4` characters has at most `_READ_CAP` bytes (and fewer
    # characters than bytes): only a longer one needs its bytes counted, and cutting.
    if max(map(len, lines)) > _READ_CAP // 4:
        return [_decode_line(line[:_READ_CAP]) for line in raw.split(b"\n")]
    if "\r" in text:
        return [line.rstrip("\r") for line in lines]
    return lines


def _skip_to_next_line(stream: BinaryIO) -> bytes:
    """Drop the rest of an over-long line; what follows its newline (maybe nothing) is kept."""
    while True:
        block = stream.read(_BLOCK)
        if not block:
            return b""
        end = block.find(b"\n")
        if end >= 0:
            return block[end + 1:]


def classify_file(path: str, catalogue: Catalogue | None = None) -> Verdict:
    """Raises OSError when the file cannot be opened or read. The same verdict as `classify_lines`
    over `iter_lines` of the file, with only the lines that hold a catalogue literal decoded."""
    cat = catalogue or default_catalogue()
    with open(path, "rb") as stream:
        return _verdict(cat, cat.scan_blocks(_byte_blocks(stream)))


def verdict_json(path: str, verdict: Verdict) -> dict[str, object]:
    """The `--json` object for one path; its keys are a public contract."""
    return {
        "path": path,
        "category": str(verdict.category),
        "culprit_kind": str(verdict.culprit_kind),
        "culprit": verdict.culprit,
        "restart": verdict.restart,
        "drain": verdict.drain,
        "exclude": verdict.exclude,
        "signatures": list(verdict.signatures),
        "evidence": [{"line": e.line, "text": e.text} for e in verdict.evidence],
        "explanation": verdict.explanation,
        # The culprit's parts, for tools that compare verdicts; `culprit` is the display name.
        "culprit_host": verdict.host,
        "culprit_gpu": verdict.gpu,
        "culprit_rank": verdict.rank,
        "confidence": str(verdict.confidence),
        "settle": verdict.settle,
        "restart_effect": str(verdict.restart_effect),
    }


def render_text(path: str, verdict: Verdict) -> str:
    culprit = f"{verdict.culprit or '-'} ({verdict.culprit_kind})"
    lines = [
        f"== {path}",
        f"category:   {verdict.category}",
        f"culprit:    {culprit}",
        f"restart:    {'yes' if verdict.restart else 'no'}"
        + (f", away from {verdict.host} (not drained)" if verdict.exclude and verdict.host else ""),
        f"drain:      {'yes' if verdict.drain else 'no'}",
        f"signatures: {', '.join(verdict.signatures) or '-'}",
        f"why:        {verdict.explanation}",
        f"confidence: {verdict.confidence}" + (f" (to settle it: {verdict.settle})" if verdict.settle else ""),
    ]
    if verdict.evidence:
        lines.append("evidence:")
        width = len(str(verdict.evidence[-1].line))
        lines += [f"  {e.line:>{width}} | {e.text}" for e in verdict.evidence]
    return "\n".join(lines) + "\n"


def run_classify(paths: Sequence[str], as_json: bool, out: TextIO, err: TextIO,
                 catalogue: Catalogue | None = None) -> int:
    """Classify each path; 0 if all were read, 2 if any could not be (the others still are)."""
    status = 0
    for index, path in enumerate(paths):
        try:
            verdict = classify_file(path, catalogue)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            err.write(f"goodput classify: cannot read {path}: {reason}\n")
            status = 2
            continue
        if as_json:
            out.write(json.dumps(verdict_json(path, verdict), ensure_ascii=False) + "\n")
        else:
            if index:
                out.write("\n")
            out.write(render_text(path, verdict))
    return status


_KIND_OF: dict[Category, AnomalyKind] = {
    Category.GPU_HARDWARE: AnomalyKind.GPU_FAULT, Category.NVLINK: AnomalyKind.GPU_FAULT,
    Category.NODE_FAILURE: AnomalyKind.NODE_FAILURE, Category.HANG: AnomalyKind.HANG,
    Category.NCCL_TIMEOUT: AnomalyKind.HANG, Category.STRAGGLER: AnomalyKind.STRAGGLER,
    Category.OOM: AnomalyKind.OOM, Category.STORAGE: AnomalyKind.STORAGE,
    Category.APP_ERROR: AnomalyKind.CRASH, Category.NETWORK: AnomalyKind.CRASH,
    Category.SCHEDULER_POLICY: AnomalyKind.JOB_FAILED, Category.UNKNOWN: AnomalyKind.OTHER,
}


def anomaly_from_verdict(verdict: Verdict, *, anomaly_id: str, job_id: str, observed_at: datetime,
                         detected_at: datetime, cluster: str = "default", job_attempt: int = 0,
                         host: str | None = None) -> Anomaly:
    """The live service's anomaly for a classified log; `host` is where the log came from, if known.
    A verdict that drains (a GPU or node fault, or an application fault that wedged the GPU) names
    the source host when the log itself names none."""
    node = verdict.host or (host if verdict.drain or verdict.culprit_kind in (CulpritKind.GPU, CulpritKind.NODE)
                            else None)
    return Anomaly(
        id=anomaly_id, source=AnomalySource.LOG, kind=_KIND_OF[verdict.category], cluster=cluster,
        job_id=job_id, job_attempt=job_attempt, nodes=(node,) if node else (),
        ranks=(verdict.rank,) if verdict.rank is not None else (),
        gpus=(verdict.gpu,) if verdict.gpu else (),
        evidence=[e.text for e in verdict.evidence], signature_ids=verdict.signatures,
        category=verdict.category, observed_at=observed_at, detected_at=detected_at,
        restart_effect=verdict.restart_effect, restart_held_back=(verdict.held_back or "")[:400],
        confidence=verdict.confidence.value)
