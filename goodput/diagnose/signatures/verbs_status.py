"""libibverbs' completion statuses as data, and the signatures goodput derives from them.

An RDMA transfer that fails ends in one work-completion status, and `ibv_poll_cq(3)` says what
each means: some are an access or request the hardware refused (a configuration that fails the
same way on every attempt), others only say the other side stopped answering. NCCL prints the
status's number, UCX the words of the mlx5 hardware syndrome behind it, other programs its name.
Before this table goodput read the numbers NCCL prints for five statuses and restarted every other
one alike; here `data/vendor/ibv-wc-status.toml` gives each status its documented reading (see
`readings`), and this module says how a log spells a status.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import Field, model_validator

from goodput.diagnose.signatures.readings import CodeTable, VendorCode, code_signatures, load_code_table

TABLE_FILE = "ibv-wc-status.toml"
# Catalogue fragments (catalogue.toml), shared with the hand-written IB rules: NCCL's completion
# line up to the status's number, and UCX's mlx5 report between a syndrome's words and its number.
NCCL_PREFIX = "{nccl_ib_completion}"
UCX_SYNDROME = "{ucx_synd}"
# UCX's verbs transports (rc_verbs, ud_verbs): `send completion with error: <ibv_wc_status_str>`.
VERBS_COMPLETION = r"[Cc]ompletion with error: "


class WcStatus(VendorCode):
    """One value of enum ibv_wc_status, with the mlx5 syndrome and UCX's words where it has them."""

    name: str = Field(pattern=r"^IBV_WC_[A-Z_]+$")
    message: str = Field(min_length=3)
    syndrome: int | None = Field(default=None, ge=0, le=255)
    ucx: str = ""

    @model_validator(mode="after")
    def _ucx_words_need_their_syndrome(self) -> WcStatus:
        if bool(self.ucx) != (self.syndrome is not None):
            raise ValueError(f"{self.name}: UCX's words and the mlx5 syndrome go together")
        return self

    def label(self) -> str:
        return self.name

    def source_note(self) -> str:
        return f", mlx5 syndrome 0x{self.syndrome:02x}" if self.syndrome is not None else ""

    def pattern(self) -> str:
        """NCCL's number, the status's name anywhere, its `ibv_wc_status_str` message after UCX's verbs
        transports' words, and UCX's mlx5 words with the matching syndrome."""
        forms = [rf"{NCCL_PREFIX}(?P<code>{self.code})\b", rf"\b{self.name}\b",
                 VERBS_COMPLETION + re.escape(self.message)]
        if self.ucx and self.syndrome is not None:
            forms.append(rf"{self.ucx}{UCX_SYNDROME}0?{self.syndrome:x}\b")
        return "|".join(forms)

    def literals(self) -> tuple[str, ...]:
        return ("Got completion", self.name, self.message) + ((self.ucx,) if self.ucx else ())


@cache
def load_table() -> CodeTable[WcStatus]:
    return load_code_table(TABLE_FILE, WcStatus, "status")


def signature_entries(table: CodeTable[WcStatus]) -> list[dict[str, Any]]:
    return code_signatures(table, id_prefix="ibv-wc", family="nccl-net", kind="RDMA completion")
