"""The system's error codes (Linux errno, getaddrinfo's EAI_*) as data, and their signatures.

Much of what ends a training job reaches its log as a system error inside a Python exception or a
PyTorch message: `OSError: [Errno 12] Cannot allocate memory`, `socket.gaierror: [Errno -2] Name
or service not known`, `OSError: [Errno 113] No route to host`. The code says more than the exception:
host memory refused, a per-process limit, a read-only mount, a network without a route, a name the
resolver does not know. Before this table the storage codes and a lost connection had rules and
the rest were read as the program's own exception. `data/vendor/linux-errno.toml` gives each code
its documented reading (see `readings`); this module says how a log spells one.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import CodeTable, RewordedCode, code_signatures, load_code_table

TABLE_FILE = "linux-errno.toml"
# A message read alone must not follow `- ` (c10d's `errno: N - <message>`): the start of the line,
# or a character other than a dash before a space, or a character that is neither.
NOT_AFTER_C10D_DASH = r"(?:^|[^-]\s|[^\s-])"


class OsErrorCode(RewordedCode):
    """One errno (positive) or getaddrinfo error (negative, as glibc numbers them)."""

    code: int = Field(ge=-99, le=4095)
    name: str = Field(pattern=r"^E(?:AI_)?[A-Z0-9]+$")
    message: str = Field(min_length=3)
    # The message is a sentence only this code's strerror produces, so it is read without a number.
    alone: bool = False

    def key(self) -> str:
        return f"eai{-self.code}" if self.code < 0 else str(self.code)

    def label(self) -> str:
        return self.name

    def pattern(self) -> str:
        """Python's `[Errno N] <message>`, the name, and the message alone where the row says so;
        never after c10d's `N - ` (`errno: 113 - No route to host`, `gai error: -3 - ...`), which
        c10d prints as a warning while it retries."""
        forms = [rf"\b{self.name}\b"]
        for message in self.messages():
            escaped = re.escape(message)
            forms.append(NOT_AFTER_C10D_DASH + escaped if self.alone else rf"\[Errno {self.code}\] {escaped}")
        return "|".join(forms)

    def literals(self) -> tuple[str, ...]:
        return (self.name, *self.messages())


@cache
def load_table() -> CodeTable[OsErrorCode]:
    return load_code_table(TABLE_FILE, OsErrorCode, "error")


def signature_entries(table: CodeTable[OsErrorCode]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="errno", family="system", kind="System error")
