"""CUDA's error codes as data, and the signatures goodput derives from them.

A failed CUDA call is the most common last line of a dead training job, and CUDA documents what
each code means: the program's own kernel or build (an illegal address, no kernel image for this
GPU), the job's toolkit against the node's driver, the node's driver stack, or nothing that decides
by itself. Before this table only the codes with a rule of their own were read, so an NCCL
`Cuda failure 'peer access is not supported ...'` or a bare `CUDA_ERROR_NO_BINARY_FOR_GPU` said
nothing. Here `data/vendor/cuda-errors.toml` is the single source: every row becomes one ordinary
RE2 signature whose decision follows its documented reading, except rows whose code a hand-written
rule already reads (that rule weighs more than the code: who holds the memory, which GPU erred).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import Reading
from goodput.models import Frozen

TABLE_FILE = "cuda-errors.toml"
# The catalogue fragment (catalogue.toml) for a CUDA wrapper's words before a message: the message
# alone ("invalid argument") is too common a phrase to read as CUDA's.
WRAPPER_FRAGMENT = "{cuda_said}"


class CudaError(Frozen):
    """One code of cudaError_t (and its CUresult twin where the driver has one)."""

    code: int = Field(ge=1, le=99_999)
    runtime: str = Field(pattern=r"^cudaError[A-Za-z]+$")
    driver: str = Field(default="", pattern=r"^(?:CUDA_ERROR_[A-Z_]+)?$")
    message: str = Field(min_length=3)
    reading: str
    # A hand-written rule that reads this code with more than the code (generation skips the row).
    signature: str = ""
    meaning: str = Field(min_length=1)


class CudaTable(Frozen):
    document: str
    url: str
    version: str
    readings: dict[str, Reading]
    errors: tuple[CudaError, ...]

    def source(self, error: CudaError) -> str:
        names = f"{error.runtime} = {error.code}" + (f", {error.driver}" if error.driver else "")
        return f"{self.document} ({self.url}), {names}; {self.version}"


def parse_table(doc: Mapping[str, Any]) -> CudaTable:
    """The TOML document as a validated table; ValueError for anything inconsistent."""
    meta = dict(doc["source"])
    table = CudaTable(document=meta["document"], url=meta["url"], version=str(meta["version"]),
                      readings={k: Reading.model_validate(v) for k, v in dict(doc["reading"]).items()},
                      errors=tuple(CudaError.model_validate(e) for e in doc.get("error", [])))
    codes = [e.code for e in table.errors]
    if len(set(codes)) != len(codes):
        raise ValueError("a CUDA error code appears twice in the table")
    for error in table.errors:
        if error.signature:
            continue
        if error.reading not in table.readings:
            raise ValueError(f"{error.runtime}: reading {error.reading!r} has no weighing and no rule of its own")
    return table


@cache
def load_table() -> CudaTable:
    data = resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", TABLE_FILE)
    return parse_table(tomllib.loads(data.read_text(encoding="utf-8")))


def pattern_of(error: CudaError) -> str:
    """The code's names anywhere, or its message after a CUDA wrapper's words (a fragment the loader
    expands, as it does for hand-written rules)."""
    names = [rf"\b{error.runtime}\b"] + ([rf"\b{error.driver}\b"] if error.driver else [])
    return "|".join([*names, WRAPPER_FRAGMENT + re.escape(error.message)])


def row_signature(table: CudaTable, error: CudaError) -> dict[str, Any]:
    """The raw catalogue entry (as in a family TOML file) for one code of the table."""
    reading = table.readings[error.reading]
    names = error.runtime + (f" / {error.driver}" if error.driver else "")
    return {
        "id": f"cuda-error-{error.code}",
        "family": "cuda",
        **reading.weighing(),
        "pattern": pattern_of(error),
        "literals": tuple(x for x in (error.runtime, error.driver, error.message) if x),
        "source": table.source(error),
        "explanation": f"CUDA error {error.code} ({names}): {error.meaning}. {reading.because}",
    }


def signature_entries(table: CudaTable) -> list[dict[str, Any]]:
    """One signature per code without a rule of its own, in table order."""
    return [row_signature(table, e) for e in table.errors if not e.signature]
