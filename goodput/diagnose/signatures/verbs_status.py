"""libibverbs' completion statuses as data, and the signatures goodput derives from them.

An RDMA transfer that fails ends in one work-completion status, and `ibv_poll_cq(3)` says what
each means: some are an access or request the hardware refused (a configuration that fails the
same way on every attempt), others only say the other side stopped answering. NCCL prints the
status's number, UCX the words of the mlx5 hardware syndrome behind it, other programs its name.
Before this table goodput read the numbers NCCL prints for five statuses and restarted every other
one alike; here `data/vendor/ibv-wc-status.toml` gives each status its documented reading and
every spelling, and rows that a hand-written rule reads (with a peer to name, or as a knock-on)
point at that rule.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from pydantic import Field

from goodput.diagnose.signatures.readings import Reading
from goodput.models import Frozen

TABLE_FILE = "ibv-wc-status.toml"
# NCCL's IB transport: `NET/IB : Got completion from peer <addr><port> with status=N` (older NCCL:
# `with error N`); the hand-written NCCL rules use the same prefix.
NCCL_PREFIX = r"NET/IB ?: Got completion (?:from peer (?P<peer>[^\s<]+?)(?:%\w+)?<\d+> )?with (?:status=|error )"
# UCX's mlx5 report: `<words> on <device>:<port>/<IB|RoCE> (synd 0x<syndrome> ...`.
UCX_DEVICE = r" on [\w.-]{1,32}:\d{1,3}/\w{1,8} \(synd "


class WcStatus(Frozen):
    """One value of enum ibv_wc_status, with the mlx5 syndrome and UCX's words where it has them."""

    code: int = Field(ge=1, le=255)
    name: str = Field(pattern=r"^IBV_WC_[A-Z_]+$")
    message: str = Field(min_length=3)
    syndrome: int | None = Field(default=None, ge=0, le=255)
    ucx: str = ""
    reading: str
    signature: str = ""
    meaning: str = Field(min_length=1)


class StatusTable(Frozen):
    document: str
    url: str
    version: str
    readings: dict[str, Reading]
    statuses: tuple[WcStatus, ...]

    def source(self, status: WcStatus) -> str:
        syndrome = f", mlx5 syndrome 0x{status.syndrome:02x}" if status.syndrome is not None else ""
        return f"{self.document} ({self.url}), {status.name} = {status.code}{syndrome}; {self.version}"


def parse_table(doc: Mapping[str, Any]) -> StatusTable:
    """The TOML document as a validated table; ValueError for anything inconsistent."""
    meta = dict(doc["source"])
    table = StatusTable(document=meta["document"], url=meta["url"], version=str(meta["version"]),
                        readings={k: Reading.model_validate(v) for k, v in dict(doc["reading"]).items()},
                        statuses=tuple(WcStatus.model_validate(s) for s in doc.get("status", [])))
    codes = [s.code for s in table.statuses]
    if len(set(codes)) != len(codes):
        raise ValueError("a work-completion status appears twice in the table")
    for status in table.statuses:
        if status.reading not in table.readings:
            raise ValueError(f"{status.name}: reading {status.reading!r} has no weighing")
        if bool(status.ucx) != (status.syndrome is not None):
            raise ValueError(f"{status.name}: UCX's words and the mlx5 syndrome go together")
    return table


@cache
def load_table() -> StatusTable:
    data = resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", TABLE_FILE)
    return parse_table(tomllib.loads(data.read_text(encoding="utf-8")))


def pattern_of(status: WcStatus) -> str:
    """NCCL's number, the status's name anywhere, and UCX's words with the matching syndrome."""
    forms = [rf"{NCCL_PREFIX}(?P<code>{status.code})\b", rf"\b{status.name}\b"]
    if status.ucx and status.syndrome is not None:
        forms.append(rf"{status.ucx}{UCX_DEVICE}0x0?{status.syndrome:x}\b")
    return "|".join(forms)


def literals_of(status: WcStatus) -> tuple[str, ...]:
    return ("Got completion", status.name) + ((status.ucx,) if status.ucx else ())


def row_signature(table: StatusTable, status: WcStatus) -> dict[str, Any]:
    """The raw catalogue entry (as in a family TOML file) for one status of the table."""
    reading = table.readings[status.reading]
    return {
        "id": f"ibv-wc-{status.code}",
        "family": "nccl-net",
        **reading.weighing(),
        "pattern": pattern_of(status),
        "literals": literals_of(status),
        "source": table.source(status),
        "explanation": f"RDMA completion {status.name} ({status.code}): {status.meaning}. {reading.because}",
    }


def signature_entries(table: StatusTable) -> list[dict[str, Any]]:
    """One signature per status without a rule of its own, in table order."""
    return [row_signature(table, s) for s in table.statuses if not s.signature]
