"""NVML's return codes as data, and the signatures goodput derives from them.

NVML is how the NVIDIA device plugin, DCGM, nvidia-container-cli, pynvml and goodput's own GPU
probe ask the driver about a GPU, and when the answer is bad they print NVML's code: `pynvml.
NVMLError_GpuIsLost: GPU is lost`, `nvidia-container-cli: initialization error: nvml error: driver
not loaded`. NVML's reference says what each means for the GPU or its node. Before this table three
codes had rules, two of which missed NVML's own wording (`GPU requires restart`, pynvml's class
names); `data/vendor/nvml-errors.toml` gives each code its reading (see `readings`), and this module
says how a log spells an NVML code.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import CodeTable, VendorCode, code_signatures, load_code_table

TABLE_FILE = "nvml-errors.toml"


class NvmlError(VendorCode):
    """One nvmlReturn_t with nvmlErrorString's message and pynvml's name for its exception."""

    name: str = Field(pattern=r"^NVML_ERROR_[A-Z_]+$")
    pynvml: str = Field(pattern=r"^[A-Z][A-Za-z]+$")
    # pynvml's string for the code; `library` the C library's nvmlErrorString where it differs.
    message: str = Field(min_length=3)
    library: str = ""

    def label(self) -> str:
        return self.name

    def library_message(self) -> str:
        return self.library or self.message

    def pattern(self) -> str:
        """The enum's name, pynvml's class, pynvml's and the library's message (phrases only NVML
        uses), and the library's message lower-cased after nvidia-container-cli's `nvml error: `."""
        messages = dict.fromkeys((self.message, self.library_message()))
        return "|".join([rf"\b{self.name}\b", rf"\bNVMLError_{self.pynvml}\b", *map(re.escape, messages),
                         "nvml error: " + re.escape(self.library_message().lower())])

    def literals(self) -> tuple[str, ...]:
        return (self.name, f"NVMLError_{self.pynvml}", *dict.fromkeys((self.message, self.library_message())),
                "nvml error: " + self.library_message().lower())


@cache
def load_table() -> CodeTable[NvmlError]:
    return load_code_table(TABLE_FILE, NvmlError, "error")


def signature_entries(table: CodeTable[NvmlError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="nvml-error", family="gpu", kind="NVML error")
