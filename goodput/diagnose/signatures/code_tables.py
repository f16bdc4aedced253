"""The vendors' code tables the catalogue generates signatures from, listed once.

Each table module (CUDA's, NVML's and DCGM's errors, libibverbs' statuses, EFA's, Slurm's, MPI's and
the system's codes) reads its TOML file from `data/vendor/` and turns its rows into raw catalogue
entries through `readings`; the loader asks each of them here, so adding a table is one line.
NVIDIA's Xid catalogue is not among them: it carries decode rules beside its rows (`vendor`).
"""

from __future__ import annotations

from typing import Any, Protocol

from goodput.diagnose.signatures import (
    cuda_errors,
    dcgm_errors,
    efa_errors,
    errno_codes,
    mpi_errors,
    nvml_errors,
    slurm_errors,
    verbs_status,
)
from goodput.diagnose.signatures.readings import CodeTable


class CodeTableModule(Protocol):
    TABLE_FILE: str

    def load_table(self) -> CodeTable[Any]: ...

    def signature_entries(self, table: CodeTable[Any]) -> list[dict[str, Any]]: ...


MODULES: tuple[CodeTableModule, ...] = (
    cuda_errors, verbs_status, efa_errors, slurm_errors, errno_codes, nvml_errors, mpi_errors, dcgm_errors)


def generated(module: CodeTableModule) -> list[dict[str, Any]]:
    """One raw catalogue entry per row of the module's table that no hand-written rule reads."""
    return module.signature_entries(module.load_table())
