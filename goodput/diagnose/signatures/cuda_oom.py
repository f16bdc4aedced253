"""What the figures of PyTorch's CUDA out-of-memory message say about who holds the GPU.

The caching allocator's message is not only "out of memory": it states the request, the device's
capacity, what the device still has free and what this process holds (PyTorch 1.x: "reserved in
total by PyTorch"; 2.x: "this process has X memory in use", after one line per *other* process on
the device). Those figures separate three situations a restart treats differently:

- the process itself fills the device (the model, batch or parallelism does not fit): an unchanged
  restart fails the same way, which is what the plain `torch-cuda-oom` rule says;
- the device had more free memory than was asked for and the allocation still failed: the free
  memory is in pieces (fragmentation), a state of this process that a fresh one does not start in;
- most of the device is held by memory that is not this process's: another process holds the GPU.
  A leftover of an earlier job and a co-located process of the same job (an inference server beside
  a trainer) print the same figures, so the node is named but not drained; a rerun is worth it.

Only the first CUDA OOM of a log is read (the first rank to fail), with the line after it when a
terminal or collector wrapped the message; every figure is bounded before it is converted.
"""

from __future__ import annotations

import dataclasses

from goodput.diagnose.signatures.model import Match, Signature
from goodput.models import Category, CulpritKind
from goodput.untrusted_text import LinearRegex

_OOM_ID = "torch-cuda-oom"
_FIGURES_ID = "torch-cuda-oom-figures"
# Another process holds the device when memory this process does not hold is at least this share.
FOREIGN_SHARE = 0.5
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
# No GPU has a petabyte; a longer figure is noise, never a size.
_MAX_BYTES = 1 << 50
_SIZE = r"(\d{1,9}(?:\.\d{1,4})?) (bytes|KiB|MiB|GiB|TiB)"
_OLD = LinearRegex(
    rf"Tried to allocate {_SIZE} \(GPU \d{{1,4}}; {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free;"
    rf"(?: {_SIZE} allowed;)? {_SIZE} (?:reserved in total by PyTorch|cached)")
_NEW = LinearRegex(
    rf"Tried to allocate {_SIZE}\. GPU \d{{1,4}} has a total capaci?ty of {_SIZE} of which {_SIZE} is free\."
    rf".{{0,1000}}?Including non-PyTorch memory, this process has {_SIZE} memory in use")
_SOURCE = ("PyTorch, CUDA semantics notes, Memory management and Optimizing memory usage with "
           "PYTORCH_CUDA_ALLOC_CONF (memory_reserved is what the caching allocator holds; max_split_size_mb and "
           "expandable_segments against fragmentation); c10/cuda/CUDACachingAllocator.cpp (the out-of-memory "
           "message: the request, the device's total capacity and free memory, what this process holds, and in "
           "2.x one line per other process using the device, read through NVML)")


@dataclasses.dataclass(frozen=True, slots=True)
class OomFigures:
    """The figures of one CUDA OOM message, in bytes."""

    tried: int
    total: int
    free: int
    mine: int  # what this process holds: PyTorch's reservation (1.x) or all its memory on the device (2.x)


def _synthetic(sig_id: str, culprit: CulpritKind, explanation: str) -> Signature:
    return Signature(id=sig_id, family="oom", category=Category.OOM, culprit_kind=culprit, precedence=63,
                     pattern=r"\A\z", literals=(sig_id,), restart=True, drain=False, source=_SOURCE,
                     settles=False, explanation=explanation)


FRAGMENTED = _synthetic(
    "cuda-oom-fragmented", CulpritKind.APP,
    "CUDA ran out of memory although the device reported more free memory than the request: the free memory "
    "is in pieces (fragmentation built up over the run), not too small. A fresh process starts unfragmented, so "
    "a restart from the last checkpoint is worth it; to stop it recurring set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb).")
FOREIGN = _synthetic(
    "cuda-oom-device-held-elsewhere", CulpritKind.NODE,
    "CUDA ran out of memory while most of the device was held by memory that is not this process's: another "
    "process holds the GPU (a leftover of an earlier job, a process the scheduler does not know about, or a "
    "co-located process of the same job). Check the node's GPU processes (nvidia-smi) and clean it if the "
    "process is not the job's; a rerun on a free GPU is worth it.")


def _bytes(number: str | None, unit: str | None) -> int | None:
    if number is None or unit not in _UNITS:
        return None
    value = int(float(number) * _UNITS[unit])  # at most 9+4 digits: float is exact enough
    return value if value < _MAX_BYTES else None


def read_figures(text: str) -> OomFigures | None:
    """The figures of a CUDA OOM message (either PyTorch format), or None if it has none that make sense."""
    found = _OLD.search_text(text)
    old = found is not None
    if found is not None:
        # Groups: tried, total, already allocated, free, allowed (optional), reserved; two per size.
        picks = (1, 3, 7, 11)
    else:
        found = _NEW.search_text(text)
        if found is None:
            return None
        picks = (1, 3, 5, 7)
    sizes = [_bytes(found.group(i), found.group(i + 1)) for i in picks]
    tried, total, free, mine = sizes
    if tried is None or total is None or free is None or mine is None or total == 0 or free > total:
        return None
    if old and found.group(9) is not None:
        # A per-process cap (set_per_process_memory_fraction): only what is left under it is free to this process.
        allowed = _bytes(found.group(9), found.group(10))
        free = min(free, max(0, allowed - mine)) if allowed is not None else 0
    return OomFigures(tried=tried, total=total, free=free, mine=mine)


def verdict_of(figures: OomFigures) -> Signature | None:
    """The class the figures put the OOM in; None where they say the process itself filled the device."""
    if figures.total - figures.free - figures.mine >= FOREIGN_SHARE * figures.total:
        return FOREIGN
    if figures.free >= figures.tried:
        return FRAGMENTED
    return None


class OomReader:
    """Keeps the first CUDA OOM of a log (and the line after it, for a wrapped message)."""

    def __init__(self) -> None:
        self._oom: Match | None = None
        self._text = ""
        self._done = False

    def observe(self, match: Match) -> None:
        if self._done:
            return
        sig_id = match.signature.id
        if self._oom is None:
            if sig_id == _OOM_ID:
                self._oom, self._text = match, match.text
        elif sig_id == _FIGURES_ID and match.line_no == self._oom.line_no + 1:
            self._text = f"{self._text} {match.text}"
            self._done = True
        elif match.line_no > self._oom.line_no + 1:
            self._done = True

    def synthesize(self) -> list[Match]:
        if self._oom is None:
            return []
        figures = read_figures(self._text)
        signature = verdict_of(figures) if figures is not None else None
        return [] if signature is None else [dataclasses.replace(self._oom, signature=signature)]
