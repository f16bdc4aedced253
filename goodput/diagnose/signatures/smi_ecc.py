"""A GPU whose volatile uncorrectable ECC count is not zero, read from `nvidia-smi -q`.

nvidia-smi counts a GPU's ECC errors twice: *volatile*, since the driver last loaded, and
*aggregate*, over the GPU's life. An uncorrectable (double-bit) error in the volatile count
happened on this boot, and DCGM, reading the same counter, calls it `DCGM_FR_VOLATILE_DBE_DETECTED`
with severity ISOLATE: the GPU cannot take work until it is reset (on A100 and later the failing
row is remapped at that reset). The default table shows the count in its last column, one line per
GPU (`smi-volatile-uncorrectable-ecc` reads it). `nvidia-smi -q` prints it in its `ECC Errors`
section, where the same keys appear under `Volatile` and under `Aggregate`: only the section tells
them apart, so no single line can. An application error printed beside it (a CUDA out-of-memory,
an illegal access) is then the GPU's symptom, not the job's cause.

`VolatileEcc` follows the sections of one log in line order (bounded memory, like the other
readers) and `synthesize` returns one hit of `VOLATILE_UNCORRECTABLE` naming the GPU by the bus id
of the section it was printed in.
"""

from __future__ import annotations

import dataclasses

from goodput.diagnose.signatures.model import Match, Signature
from goodput.models import Category, CulpritKind
from goodput.untrusted_text import bounded_int

SCOPE_ID = "smi-q-ecc-scope"
BITS_ID = "smi-q-ecc-bits"
COUNT_ID = "smi-q-ecc-count"
HEADER_ID = "smi-q-gpu-header"
_COUNT_DIGITS = 9

VOLATILE_UNCORRECTABLE = Signature(
    id="smi-q-volatile-uncorrectable-ecc", family="gpu", category=Category.GPU_HARDWARE, culprit_kind=CulpritKind.GPU,
    precedence=99, pattern=r"\A\z", literals=("smi-q-volatile-uncorrectable-ecc",), restart=True, drain=True,
    source=("NVIDIA, nvidia-smi(1), ECC Errors: volatile counters count the errors since the last driver load, "
            "aggregate ones persist; uncorrectable are double-bit errors. NVIDIA DCGM, dcgmlib/dcgm_errors.h and "
            "dcgm_errors.c: DCGM_FR_VOLATILE_DBE_DETECTED (volatile double-bit ECC errors), severity ISOLATE "
            "(the GPU should be isolated). NVIDIA, GPU Memory Error Management: after an uncorrectable error "
            "the GPU needs a reset (rows are remapped then)"),
    explanation=("nvidia-smi -q counts uncorrectable ECC errors on this GPU since the driver loaded (its Volatile "
                 "section): its memory failed and it has not been reset since, which DCGM grades as a GPU to "
                 "isolate. CUDA errors the job raised on it (an out-of-memory among them) follow from that. Drain "
                 "the node for a GPU reset (row remap), replace the GPU if it recurs; rerun elsewhere."))


class VolatileEcc:
    """The first GPU of one log that nvidia-smi reports with volatile uncorrectable ECC errors."""

    def __init__(self) -> None:
        self._gpu: Match | None = None  # the `-q` section being read: its `GPU <bus id>` line
        self._volatile = False
        self._double_bit = False
        self._found: Match | None = None

    def observe(self, match: Match) -> None:
        if self._found is not None:
            return
        sig_id = match.signature.id
        if sig_id == HEADER_ID:
            self._gpu, self._volatile, self._double_bit = match, False, False
        elif sig_id == SCOPE_ID:
            self._volatile, self._double_bit = match.groups.get("detail") == "Volatile", False
        elif sig_id == BITS_ID:
            self._double_bit = match.groups.get("detail") == "Double"
        elif sig_id == COUNT_ID and self._volatile:
            key = match.groups.get("detail", "")
            if key == "Total" and not self._double_bit:  # the single-bit total: corrected errors
                return
            self._note(match, self._gpu.groups.get("pci") if self._gpu is not None else None)

    def _note(self, match: Match, pci: str | None) -> None:
        """The first non-zero count decides: one GPU named, and the log's later sections not held."""
        count = bounded_int(match.groups.get("code"), max_digits=_COUNT_DIGITS)
        if not count:
            return
        groups = {key: value for key, value in match.groups.items() if key == "host"}
        if pci:
            groups["pci"] = pci
        self._found = dataclasses.replace(match, signature=VOLATILE_UNCORRECTABLE, groups=groups)

    def synthesize(self) -> list[Match]:
        return [self._found] if self._found is not None else []
