"""The EFA provider's error codes as data, and the signatures goodput derives from them.

On AWS, a failed NCCL transfer over EFA ends in one of libfabric's EFA codes: the device's
completion statuses (0-15) or the provider's own (4096 and up). libfabric's messages and help texts
say what each means: a registration, address handle or length the device refused (the job's or the
instances' configuration), or a peer that stopped answering, most often because its process is gone.
Before this table five codes had rules and the rest were the OFI plugin's generic failed request,
restarted alike; `data/vendor/efa-errors.toml` now gives each code its documented reading, and rows
a hand-written rule in `rdma.toml` reads point at that rule.
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

TABLE_FILE = "efa-errors.toml"
# A message this long is a fixed sentence of libfabric's and is read alone; a shorter one ("Message
# too long") only after the OFI plugin's `Error: <code> (`.
DISTINCT_MESSAGE = 40


class EfaError(Frozen):
    code: int = Field(ge=1, le=65_535)
    name: str = Field(pattern=r"^(?:EFA_IO_COMP_STATUS|FI_EFA_ERR)_[A-Z_]+$")
    message: str = Field(min_length=3)
    reading: str
    signature: str = ""
    meaning: str = Field(min_length=1)


class EfaTable(Frozen):
    document: str
    url: str
    version: str
    readings: dict[str, Reading]
    errors: tuple[EfaError, ...]

    def source(self, error: EfaError) -> str:
        return f"{self.document} ({self.url}), {error.name} = {error.code}; {self.version}"


def parse_table(doc: Mapping[str, Any]) -> EfaTable:
    """The TOML document as a validated table; ValueError for anything inconsistent."""
    meta = dict(doc["source"])
    table = EfaTable(document=meta["document"], url=meta["url"], version=str(meta["version"]),
                     readings={k: Reading.model_validate(v) for k, v in dict(doc["reading"]).items()},
                     errors=tuple(EfaError.model_validate(e) for e in doc.get("error", [])))
    codes = [e.code for e in table.errors]
    if len(set(codes)) != len(codes):
        raise ValueError("an EFA error code appears twice in the table")
    unweighed = sorted({e.reading for e in table.errors} - table.readings.keys())
    if unweighed:
        raise ValueError(f"readings {unweighed} have no weighing")
    return table


@cache
def load_table() -> EfaTable:
    data = resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", TABLE_FILE)
    return parse_table(tomllib.loads(data.read_text(encoding="utf-8")))


def pattern_of(error: EfaError) -> str:
    """The OFI plugin's `Error: <code> (<message>`, the code's name, and a long message alone."""
    forms = [rf"\bError: {error.code} \({re.escape(error.message)}", rf"\b{error.name}\b"]
    if len(error.message) >= DISTINCT_MESSAGE:
        forms.append(re.escape(error.message))
    return "|".join(forms)


def row_signature(table: EfaTable, error: EfaError) -> dict[str, Any]:
    """The raw catalogue entry (as in a family TOML file) for one code of the table."""
    reading = table.readings[error.reading]
    return {
        "id": f"efa-error-{error.code}",
        "family": "rdma",
        **reading.weighing(),
        "pattern": pattern_of(error),
        "literals": (error.name, error.message),
        "source": table.source(error),
        "explanation": f"EFA error {error.code} ({error.name}): {error.meaning}. {reading.because}",
    }


def signature_entries(table: EfaTable) -> list[dict[str, Any]]:
    """One signature per code without a rule of its own, in table order."""
    return [row_signature(table, e) for e in table.errors if not e.signature]
