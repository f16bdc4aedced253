"""MPI's error classes as data, and the signatures goodput derives from them.

An MPI program that fails aborts with the class of its error by name (`*** MPI_ERR_TRUNCATE:
message truncated`, then `MPI_ERRORS_ARE_FATAL`), and the MPI Standard says what each class
means: the program's own call, a feature the library lacks, MPI-IO's storage, a peer that died.
Before this table such a log was `unknown`. `data/vendor/mpi-errors.toml` gives each class its
reading (see `readings`); this module says how a log spells one: by the standard's name, which is
the same in every implementation.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import CodeTable, VendorCode, code_signatures, load_code_table

TABLE_FILE = "mpi-errors.toml"


class MpiError(VendorCode):
    """One MPI error class, with Open MPI's number and text for it."""

    name: str = Field(pattern=r"^MPI_ERR_[A-Z_]+$")
    message: str = Field(min_length=3)

    def label(self) -> str:
        return self.name

    def pattern(self) -> str:
        return rf"\b{self.name}\b"

    def literals(self) -> tuple[str, ...]:
        return (self.name,)


@cache
def load_table() -> CodeTable[MpiError]:
    return load_code_table(TABLE_FILE, MpiError, "error")


def signature_entries(table: CodeTable[MpiError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="mpi-error", family="mpi", kind="MPI error class")
