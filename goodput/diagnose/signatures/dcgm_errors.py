"""DCGM's failure codes as data, and the signatures goodput derives from them.

DCGM is how sites and NVIDIA's own operators check a GPU between and around jobs (`dcgmi diag` in a
prolog or epilog, `dcgmi health` watches, the GPU Operator's and NVSentinel's health events), and
DCGM grades every failure it reports: isolate the GPU, drain and reset it, monitor it, triage it.
Before this table two of its findings had rules (the row-remap ones); `data/vendor/dcgm-errors.toml`
gives each code that speaks of a GPU, its NVLinks or its node a reading from DCGM's own severity,
and this module says how a log spells a DCGM code: its name, or its message with the printf fields
filled in.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import CodeTable, RewordedCode, code_signatures, load_code_table

TABLE_FILE = "dcgm-errors.toml"

# printf conversions in DCGM's formats and what each prints, bounded: integers, floats (%.2e too),
# a hex mask, a string. A string at either end of a message adds nothing a reader needs.
PRINTF_CONVERSION = re.compile(r"%([-#0-9.]*)(hh|h|ll|l|z|L)?([diuxXfeEgsc%])")
_FIELD = {"d": r"-?\d{1,20}", "i": r"-?\d{1,20}", "u": r"\d{1,20}", "x": r"(?:0x)?[0-9a-fA-F]{1,16}",
          "X": r"(?:0x)?[0-9a-fA-F]{1,16}", "f": r"-?[\d.]{1,24}", "e": r"-?[\d.]{1,24}[eE][-+]?\d{1,4}",
          "E": r"-?[\d.]{1,24}[eE][-+]?\d{1,4}", "g": r"-?[\d.eE+-]{1,24}", "s": r".{1,200}?", "c": r".",
          "%": "%"}


def format_pattern(fmt: str) -> str:
    """A DCGM printf format as a linear-time regex of what it prints (ends trimmed of `%s`)."""
    fmt = re.sub(r"^%s\s*|\s*%s\s*$", "", fmt.strip().rstrip("."))
    out, at = [], 0
    for m in PRINTF_CONVERSION.finditer(fmt):
        out += [re.escape(fmt[at:m.start()]), _FIELD[m.group(3)]]
        at = m.end()
    out.append(re.escape(fmt[at:]))
    return "".join(out)


def longest_phrase(fmt: str) -> str:
    """The longest fixed stretch of a format: the prefilter's literal for it."""
    return max((part.strip() for part in PRINTF_CONVERSION.split(fmt)[::4]), key=len)


class DcgmError(RewordedCode):
    """One dcgmError_t with DCGM's severity and category and, where it is the code's own, its message."""

    name: str = Field(pattern=r"^DCGM_FR_[A-Z0-9_]+$")
    aliases: tuple[str, ...] = ()
    severity: str = Field(pattern=r"^(ISOLATE|RESET|MONITOR|TRIAGE)$")
    dcgm_category: str = Field(pattern=r"^[A-Z_]+$")
    # `message`: the format DCGM 4.6 prints (empty: read by name only); `older`: 2.4.7's and 3.3.9's.
    note: str = ""

    def label(self) -> str:
        return self.name

    def source_note(self) -> str:
        graded = f", severity DCGM_ERROR_{self.severity}, category DCGM_FR_EC_{self.dcgm_category}"
        return graded + (f"; weighed otherwise: {self.note}" if self.note else "")

    def pattern(self) -> str:
        names = [rf"\b{re.escape(n)}\b" for n in (self.name, *self.aliases)]
        return "|".join(names + [format_pattern(m) for m in self.messages()])

    def literals(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.name, *self.aliases, *(longest_phrase(m) for m in self.messages())]))


@cache
def load_table() -> CodeTable[DcgmError]:
    return load_code_table(TABLE_FILE, DcgmError, "error")


def signature_entries(table: CodeTable[DcgmError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="dcgm-error", family="gpu", kind="DCGM failure")
