"""Checks shared by the tests of the vendors' code tables (CUDA, libibverbs, EFA): each row in each
spelling a log uses reaches its reading, and a hand-written rule a row names agrees with it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import Catalogue
from goodput.diagnose.signatures.readings import CodeTable, VendorCode

Row = TypeVar("Row", bound=VendorCode)


def spelling_cases(rows: Sequence[Row], forms: Callable[[Row], dict[str, str]]) -> list[tuple[Row, str, str]]:
    """(row, spelling, line) for every spelling of every row, for `pytest.mark.parametrize`."""
    return [(row, name, line) for row in rows for name, line in forms(row).items()]


def assert_reaches_reading(catalogue: Catalogue, table: CodeTable[Row], row: Row, id_prefix: str,
                           form: str, line: str) -> None:
    """The line hits the row's rule (its own, or the generated one) and gets the reading's verdict."""
    reading = table.readings[row.reading]
    rule = row.signature or f"{id_prefix}-{row.code}"
    hits = {m.signature.id for m in catalogue.match_line(line, 1)}
    assert rule in hits, (form, hits)
    v = classify_lines([line])
    assert (str(v.category), v.restart, v.drain) == (str(reading.category), reading.restart, reading.drain), (
        form, v.signatures)


def own_rules_disagreeing(catalogue: Catalogue, table: CodeTable[Row]) -> list[str]:
    """Rows whose hand-written rule decides otherwise than the row's reading."""
    by_id = {s.id: s for s in catalogue.signatures}
    out = []
    for row in table.rows:
        if not row.signature:
            continue
        own, reading = by_id[row.signature], table.readings[row.reading]
        if (own.category, own.restart, own.drain) != (reading.category, reading.restart, reading.drain):
            out.append(f"{row.code} -> {row.signature}")
    return out
