"""CUDA's error codes as data, and the signatures goodput derives from them.

A failed CUDA call is the most common last line of a dead training job, and CUDA documents what
each code means: the program's own kernel or build (an illegal address, no kernel image for this
GPU), the job's toolkit against the node's driver, the forward-compatibility package, or nothing
that decides by itself. Before this table only the codes with a rule of their own were read, so an
NCCL `Cuda failure 'peer access is not supported ...'` or a bare `CUDA_ERROR_NO_BINARY_FOR_GPU` said
nothing. Here `data/vendor/cuda-errors.toml` is the single source (see `readings` for how a table
becomes signatures); this module says how a log spells a CUDA error.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import CodeTable, VendorCode, code_signatures, load_code_table

TABLE_FILE = "cuda-errors.toml"
# The catalogue fragment (catalogue.toml) for a CUDA wrapper's words before a message: the message
# alone ("invalid argument") is too common a phrase to read as CUDA's.
WRAPPER_FRAGMENT = "{cuda_said}"


class CudaError(VendorCode):
    """One code of cudaError_t (and its CUresult twin where the driver has one)."""

    runtime: str = Field(pattern=r"^cudaError[A-Za-z]+$")
    driver: str = Field(default="", pattern=r"^(?:CUDA_ERROR_[A-Z_]+)?$")
    message: str = Field(min_length=3)

    def label(self) -> str:
        return self.runtime + (f" / {self.driver}" if self.driver else "")

    def pattern(self) -> str:
        """The code's names anywhere, or its message after a CUDA wrapper's words (a fragment the
        loader expands, as it does for hand-written rules)."""
        names = [rf"\b{self.runtime}\b"] + ([rf"\b{self.driver}\b"] if self.driver else [])
        return "|".join([*names, WRAPPER_FRAGMENT + re.escape(self.message)])

    def literals(self) -> tuple[str, ...]:
        return tuple(x for x in (self.runtime, self.driver, self.message) if x)


@cache
def load_table() -> CodeTable[CudaError]:
    return load_code_table(TABLE_FILE, CudaError, "error")


def signature_entries(table: CodeTable[CudaError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="cuda-error", family="cuda", kind="CUDA error")
