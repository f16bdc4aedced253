"""How goodput weighs a vendor's documented meaning of a code, shared by the code tables.

CUDA's error codes and libibverbs' completion statuses are tables of facts (a name, a number, a
message) each pointing at one *reading*: what the vendor's description makes of it (the program's
call, the fabric's configuration, the link or the peer). The reading, not the row, carries the
verdict, so every code the vendor describes alike is decided alike and a change of mind is one edit.
"""

from __future__ import annotations

from pydantic import Field

from goodput.diagnose.signatures.model import Role
from goodput.models import Category, CulpritKind, Frozen


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
