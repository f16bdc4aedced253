"""The EFA provider's error codes as data, and the signatures goodput derives from them.

On AWS, a failed NCCL transfer over EFA ends in one of libfabric's EFA codes: the device's
completion statuses (0-15) or the provider's own (4096 and up). libfabric's messages and help texts
say what each means: a registration, address handle or length the device refused (the job's or the
instances' configuration), or a peer that stopped answering, most often because its process is gone.
Before this table five codes had rules and the rest were the OFI plugin's generic failed request,
restarted alike; `data/vendor/efa-errors.toml` gives each code its documented reading (see
`readings`), and this module says how a log spells an EFA code.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import (
    DISTINCT_MESSAGE,
    CodeTable,
    VendorCode,
    code_signatures,
    load_code_table,
)

TABLE_FILE = "efa-errors.toml"
# A message of DISTINCT_MESSAGE characters or more is read alone; a shorter one ("Message too
# long") only after the OFI plugin's `Error: <code> (`.


class EfaError(VendorCode):
    name: str = Field(pattern=r"^(?:EFA_IO_COMP_STATUS|FI_EFA_ERR)_[A-Z_]+$")
    message: str = Field(min_length=3)

    def label(self) -> str:
        return self.name

    def pattern(self) -> str:
        """The OFI plugin's `Error: <code> (<message>`, the code's name, and a long message alone."""
        forms = [rf"\bError: {self.code} \({re.escape(self.message)}", rf"\b{self.name}\b"]
        if len(self.message) >= DISTINCT_MESSAGE:
            forms.append(re.escape(self.message))
        return "|".join(forms)

    def literals(self) -> tuple[str, ...]:
        return (self.name, self.message)


@cache
def load_table() -> CodeTable[EfaError]:
    return load_code_table(TABLE_FILE, EfaError, "error")


def signature_entries(table: CodeTable[EfaError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="efa-error", family="rdma", kind="EFA error")
