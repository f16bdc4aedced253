"""Vendors' code tables (CUDA's and NVML's errors, libibverbs' statuses, EFA's, Slurm's and the
system's codes) and how goodput weighs them.

Each table is facts (a code, its names, its message) pointing at one *reading*: what the vendor's
description makes of the code (the program's call, the fabric's configuration, the link or the
peer). The reading, not the row, carries the verdict, so every code the vendor describes alike is
decided alike and a change of mind is one edit. A row whose code a hand-written rule already reads
(with more than the code: a peer to name, who holds the memory) names that rule instead, and no
signature is generated for it. What differs between tables is only how a log spells a code: each
table's module defines its row type with `pattern` and `literals`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any, Generic, TypeVar

from pydantic import Field

from goodput.diagnose.signatures.model import Role
from goodput.models import Category, CulpritKind, Frozen

# A vendor's message this long is a fixed sentence of its own and a table may read it alone; a
# shorter one ("Message too long", "Invalid qos specification") is a phrase other software prints
# too, read only after the words the vendor's tools put before it.
DISTINCT_MESSAGE = 40


class Reading(Frozen):
    """One kind of documented meaning and the verdict goodput gives it."""

    category: Category
    culprit_kind: CulpritKind
    precedence: int = Field(ge=0, le=1000)
    restart: bool
    drain: bool
    settles: bool
    role: Role = Role.ROOT
    # An undecided code only adds its meaning to a line another rule reads (a Python exception's).
    generic: bool = False
    because: str = Field(min_length=1)

    def weighing(self) -> dict[str, object]:
        """The signature fields this reading decides (as in a family TOML file)."""
        return {"category": self.category.value, "culprit_kind": self.culprit_kind.value,
                "role": self.role.value, "generic": self.generic, "precedence": self.precedence,
                "restart": self.restart, "drain": self.drain, "settles": self.settles}


class VendorCode(Frozen):
    """One row of a vendor's code table; subclasses say how a log spells it."""

    code: int = Field(ge=0, le=99_999)
    reading: str
    # A hand-written rule that reads this code with more than the code (generation skips the row).
    signature: str = ""
    meaning: str = Field(min_length=1)

    def label(self) -> str:
        """The code's names, as the explanation and the source give them."""
        raise NotImplementedError

    def key(self) -> str:
        """What follows the table's prefix in the generated rule's id (the code by default)."""
        return str(self.code)

    def pattern(self) -> str:
        raise NotImplementedError

    def literals(self) -> tuple[str, ...]:
        raise NotImplementedError

    def source_note(self) -> str:
        """What the source adds after the code (a hardware syndrome); nothing by default."""
        return ""


class RewordedCode(VendorCode):
    """A code whose message the vendor has worded differently over releases (Slurm's, the system's,
    DCGM's): `older` keeps the earlier wordings, which logs of older releases still print."""

    message: str = ""
    older: tuple[str, ...] = ()

    def messages(self) -> tuple[str, ...]:
        """Every wording a log may show, the current one first; none where the row has no message."""
        return (self.message, *self.older) if self.message else ()


Row = TypeVar("Row", bound=VendorCode)


class CodeTable(Frozen, Generic[Row]):
    document: str
    url: str
    version: str
    readings: dict[str, Reading]
    rows: tuple[Row, ...]

    def source(self, row: Row) -> str:
        return f"{self.document} ({self.url}), {row.label()} = {row.code}{row.source_note()}; {self.version}"


def parse_code_table(doc: Mapping[str, Any], row_type: type[Row], rows_key: str) -> CodeTable[Row]:
    """A table's TOML document, validated; ValueError for anything inconsistent."""
    meta = dict(doc["source"])
    rows = tuple(row_type.model_validate(r) for r in doc.get(rows_key, []))
    table: CodeTable[Row] = CodeTable(
        document=meta["document"], url=meta["url"], version=str(meta["version"]),
        readings={k: Reading.model_validate(v) for k, v in dict(doc["reading"]).items()}, rows=rows)
    keys = [r.key() for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a code appears twice in the table of {rows_key}s")
    unweighed = sorted({r.reading for r in rows if not r.signature} - table.readings.keys())
    if unweighed:
        raise ValueError(f"readings {unweighed} have no weighing and no rule of their own")
    return table


def load_code_table(file_name: str, row_type: type[Row], rows_key: str) -> CodeTable[Row]:
    data = resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", file_name)
    return parse_code_table(tomllib.loads(data.read_text(encoding="utf-8")), row_type, rows_key)


def code_signatures(table: CodeTable[Row], *, id_prefix: str, family: str, kind: str) -> list[dict[str, Any]]:
    """One raw catalogue entry (as in a family TOML file) per row without a rule of its own."""
    out: list[dict[str, Any]] = []
    for row in table.rows:
        if row.signature:
            continue
        reading = table.readings[row.reading]
        out.append({
            "id": f"{id_prefix}-{row.key()}",
            "family": family,
            **reading.weighing(),
            "pattern": row.pattern(),
            "literals": row.literals(),
            "source": table.source(row),
            "explanation": f"{kind} {row.code} ({row.label()}): {row.meaning}. {reading.because}",
        })
    return out
