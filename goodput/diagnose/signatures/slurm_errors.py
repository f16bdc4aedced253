"""Slurm's error codes as data, and the signatures goodput derives from them.

When Slurm refuses or cannot serve a job's request, the job's output ends with a Slurm client's
words and one of Slurm's own messages: `srun: error: Unable to create step for job 81234: Memory
required by task is not available`. Slurm's message decides more than any thread could: a request
refused as written fails every time, srun itself retries the busy ones, and a client that cannot
reach slurmctld is Slurm's trouble, not the job's nodes'. Before this table no rule read them and
such a job was `unknown`. `data/vendor/slurm-errors.toml` gives each code its reading (see
`readings`); this module says how a log spells a Slurm error.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import (
    DISTINCT_MESSAGE,
    CodeTable,
    RewordedCode,
    code_signatures,
    load_code_table,
)

TABLE_FILE = "slurm-errors.toml"
# The catalogue fragment (catalogue.toml) for a Slurm client's words before a message.
WRAPPER_FRAGMENT = "{slurm_said}"
# A message of DISTINCT_MESSAGE characters or more is read alone as well (slurmctld's log repeats it
# after an RPC's name); a shorter one ("Invalid qos specification") only after a client's words.


class SlurmError(RewordedCode):
    """One of Slurm's error codes (slurm_errno.h) with slurm_strerror's message."""

    name: str = Field(pattern=r"^E?SLURM(?:CTLD)?_[A-Z0-9_]+$")
    message: str = Field(min_length=3)
    since: str = Field(default="22.05", pattern=r"^\d{2}\.\d{2}$")

    def label(self) -> str:
        return self.name

    def pattern(self) -> str:
        """The code's name anywhere; each message after a client's words; a long message alone."""
        forms = [rf"\b{self.name}\b"]
        for message in self.messages():
            escaped = re.escape(message)
            # Never inside srun's `retrying (<message>)`: that is srun waiting, not failing.
            forms.append(rf"(?:^|[^(]){escaped}" if len(message) >= DISTINCT_MESSAGE else WRAPPER_FRAGMENT + escaped)
        return "|".join(forms)

    def literals(self) -> tuple[str, ...]:
        return (self.name, *self.messages())

    def source_note(self) -> str:
        return "" if self.since == "22.05" else f" (since Slurm {self.since})"


@cache
def load_table() -> CodeTable[SlurmError]:
    return load_code_table(TABLE_FILE, SlurmError, "error")


def signature_entries(table: CodeTable[SlurmError]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="slurm-error", family="slurm", kind="Slurm error")
