"""NVIDIA's Xid catalogue as data, and the signatures goodput derives from it.

NVIDIA publishes, for every Xid a driver prints, an immediate and an investigatory resolution
bucket (RESET_GPU, RESTART_APP, IGNORE, ...). Writing one hand-made rule per Xid let goodput's rules
drift from those buckets (an IGNORE Xid drained nodes, RESET_GPU ones did not); here the table in
`data/vendor/nvidia-xid.toml` is the single source: every row becomes one signature whose drain and
restart follow its bucket through the documented bucket map, and NVIDIA's NVLink5 decode sheet
(Xid 144-150) becomes a handful of signatures that read the unit and error status from the line.
Everything is generated once at load time into ordinary RE2 signatures, so matching stays linear
and the matcher needs no special case.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from enum import StrEnum
from importlib import resources
from typing import Any

from pydantic import Field

from goodput.models import Frozen

TABLE_FILE = "nvidia-xid.toml"
# The words an Xid line holds in each spelling the `{xid}` fragment reads (catalogue.toml): the
# kernel's and the device plugin's `Xid`, an event pipeline's bare `XID`.
_XID_LITERALS = ("Xid", "XID")
# A bit pattern of the decode sheet: 32 characters, most significant bit first, '-' for any bit.
_BITS = 32
_HEX = "0123456789abcdef"


class Decision(StrEnum):
    """What goodput does for an immediate-action bucket."""

    DRAIN = "drain"      # drain the node, restart the job elsewhere
    JOB = "job"          # the application's fault: no drain; restart unless the app must be checked
    NONE = "none"        # reported, decides nothing
    CONTEXT = "context"  # the number alone does not decide: a context rule reads the line or the log


class Bucket(Frozen):
    decision: Decision
    meaning: str = Field(min_length=1)


class XidRow(Frozen):
    """One row of NVIDIA's catalogue, with goodput's summary and weighing."""

    code: int = Field(ge=1, le=999)
    mnemonic: str = Field(min_length=1)
    immediate: str
    investigatory: str
    summary: str = Field(min_length=1)
    note: str = ""
    precedence: int | None = Field(default=None, ge=0, le=1000)
    category: str | None = None
    culprit_kind: str | None = None


class DecodeRow(Frozen):
    """One row of the 'Xid 144-150 Decode' sheet."""

    xid: int
    unit: str
    bits_v1: str = Field(min_length=_BITS, max_length=_BITS, pattern=r"^[01-]+$")
    bits_v2: str = Field(min_length=_BITS, max_length=_BITS, pattern=r"^[01-]+$")
    status: int = Field(ge=0, lt=1 << 32)
    immediate: str
    severity: str
    # What the sheet says happens on the local GPU ("Xid 48, AppCrash (Xid 45)", "none", ...).
    local: str = ""

    @property
    def kills_channels(self) -> bool:
        """Whether the sheet names an application crash (an Xid 45) as this row's local effect."""
        return "Xid 45" in self.local


class XidCatalog(Frozen):
    document: str
    url: str
    section: str
    decode_section: str
    version: str
    buckets: dict[str, Bucket]
    app_investigations: frozenset[str]
    defaults: dict[str, dict[str, Any]]
    rows: tuple[XidRow, ...]
    decode: tuple[DecodeRow, ...]

    def bucket(self, name: str) -> Bucket:
        try:
            return self.buckets[name]
        except KeyError:
            raise ValueError(f"bucket {name!r} has no decision in the bucket map") from None

    def source(self, what: str = "") -> str:
        section = what or self.section
        return f"{self.document} ({self.url}), {section}; catalogue of {self.version}"


def parse_table(doc: Mapping[str, Any]) -> XidCatalog:
    """The TOML document as a validated catalogue; ValueError for anything inconsistent."""
    meta = dict(doc["catalog"])
    rows = tuple(XidRow.model_validate(r) for r in doc.get("xid", []))
    decode = tuple(DecodeRow(xid=r[0], unit=r[1], bits_v1=r[2], bits_v2=r[3], status=r[4], immediate=r[5],
                             severity=r[6], local=r[7] if len(r) > 7 else "")
                   for r in doc.get("nvlink5", {}).get("decode", []))
    catalog = XidCatalog(document=meta["document"], url=meta["url"], section=meta["section"],
                         decode_section=meta["decode_section"], version=str(meta["version"]),
                         buckets={k: Bucket.model_validate(v) for k, v in dict(doc["buckets"]).items()},
                         app_investigations=frozenset(doc["job"]["app_investigations"]),
                         defaults=dict(doc["defaults"]), rows=rows, decode=decode)
    codes = [r.code for r in rows]
    if len(set(codes)) != len(codes):
        raise ValueError("an Xid appears twice in the catalogue table")
    for name in {r.immediate for r in rows} | {d.immediate for d in decode if d.immediate != "XID_154_EVAL"}:
        catalog.bucket(name)
    return catalog


def load_table() -> XidCatalog:
    data = resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", TABLE_FILE)
    return parse_table(tomllib.loads(data.read_text(encoding="utf-8")))


def restarts(catalog: XidCatalog, row: XidRow) -> bool:
    """Whether goodput restarts the job unchanged after this Xid (drain buckets: elsewhere)."""
    decision = catalog.bucket(row.immediate).decision
    if decision is Decision.JOB:
        return row.investigatory not in catalog.app_investigations
    return True


def _weighing(catalog: XidCatalog, row: XidRow) -> dict[str, Any]:
    decision = catalog.bucket(row.immediate).decision
    key = decision.value
    if decision is Decision.JOB:
        key = "job-restart" if restarts(catalog, row) else "job-app"
    base = dict(catalog.defaults[key])
    for field in ("precedence", "category", "culprit_kind"):
        value = getattr(row, field)
        if value is not None:
            base[field] = value
    return base


def row_signature(catalog: XidCatalog, row: XidRow) -> dict[str, Any]:
    """The raw catalogue entry (as in a family TOML file) for one Xid of the table."""
    bucket = catalog.bucket(row.immediate)
    decision = bucket.decision
    said = f"NVIDIA's immediate action is {row.immediate or 'not stated'}: {bucket.meaning}."
    if decision is Decision.JOB and not restarts(catalog, row):
        said += f" The investigatory action ({row.investigatory}) is to check the application first."
    note = f" {row.note}" if row.note else ""
    return {
        "id": f"xid-{row.code}",
        "family": "xid",
        **_weighing(catalog, row),
        "role": "root" if decision in (Decision.DRAIN, Decision.JOB) else "info",
        "pattern": rf"{{xid}}(?P<xid>{row.code})\b",
        "literals": _XID_LITERALS,
        "restart": restarts(catalog, row),
        "drain": decision is Decision.DRAIN,
        # A context rule in xid.toml that reads more of the line displaces the bare number.
        "fallback": 2 if decision is Decision.CONTEXT else 0,
        "source": catalog.source(f"{catalog.section}, Xid {row.code} {row.mnemonic}"),
        "explanation": f"Xid {row.code} ({row.mnemonic}): {row.summary}.{note} {said}",
    }


def bits_regex(bits: str) -> str:
    """A 32-bit pattern as a regex over its 8 hex digits, either case: a nibble '01--' becomes '[4567]'."""
    parts = []
    for i in range(0, _BITS, 4):
        nibble = bits[i:i + 4]
        digits = [d for d in range(16)
                  if all(c == "-" or int(c) == (d >> (3 - k)) & 1 for k, c in enumerate(nibble))]
        chars = "".join(dict.fromkeys(c for d in digits for c in (_HEX[d], _HEX[d].upper())))
        parts.append(chars if len(chars) == 1 else f"[{chars}]")
    return "".join(parts)


def _status_regex(status: int) -> str:
    return "".join(c if c.isdigit() else f"[{c}{c.upper()}]" for c in f"{status:08x}")


def _overlap(a: str, b: str) -> bool:
    return all(x == "-" or y == "-" or x == y for x, y in zip(a, b, strict=True))


def decided_rows(rows: Iterable[DecodeRow]) -> list[DecodeRow]:
    """Rows whose (intrinfo, status) no other row with a different bucket can also match."""
    rows = list(rows)
    keep = []
    for r in rows:
        clash = any(o.xid == r.xid and o.status == r.status and o.immediate != r.immediate
                    and any(_overlap(p, q) for p in (r.bits_v1, r.bits_v2) for q in (o.bits_v1, o.bits_v2))
                    for o in rows)
        if not clash:
            keep.append(r)
    return keep


_DECODED = {
    "RESET_GPU": ("fatal", "root", 96, True),
    "IGNORE": ("nonfatal", "info", 31, False),
    "XID_154_EVAL": ("eval154", "info", 31, False),
}


_MEANING = {
    "fatal": "a fatal link error: reset the GPU before it is used again",
    "nonfatal": "a non-fatal event: no action needed",
    "eval154": "whether the GPU needs action is said by the Xid 154 that the driver prints with it",
}


def decode_signatures(catalog: XidCatalog) -> list[dict[str, Any]]:
    """One signature per (Xid, bucket) of the decode sheet: the line's first two hex words after the
    link are the interrupt info (which unit, and for a link-down event its reason) and the error
    status, and NVIDIA's sheet gives the bucket for each combination."""
    groups: dict[tuple[int, str], list[DecodeRow]] = {}
    for row in decided_rows(catalog.decode):
        groups.setdefault((row.xid, row.immediate), []).append(row)
    out = []
    for (xid, bucket), rows in sorted(groups.items()):
        if bucket not in _DECODED:
            raise ValueError(f"decode bucket {bucket!r} has no reading")
        name, role, precedence, drain = _DECODED[bucket]
        alternatives = "|".join(dict.fromkeys(
            f"{bits_regex(bits)}\\s+0x{_status_regex(r.status)}" for r in rows for bits in (r.bits_v1, r.bits_v2)))
        units = ", ".join(dict.fromkeys(r.unit for r in rows))
        meaning = _MEANING[name]
        out.append({
            "id": f"xid-{xid}-decoded-{name}",
            "family": "xid",
            "category": "nvlink",
            "culprit_kind": "node",
            "role": role,
            "precedence": precedence,
            "pattern": rf"{{xid}}(?P<xid>{xid})\b.*\(0x(?P<code>{alternatives})\b",
            "literals": _XID_LITERALS,
            "restart": True,
            "drain": drain,
            "source": catalog.source(f"{catalog.decode_section}, Xid {xid}, bucket {bucket}"),
            "explanation": (f"Xid {xid} decoded with NVIDIA's decode sheet (unit {units}; interrupt info and "
                            f"error status from the line): {bucket}, {meaning}."),
        })
    return out


def follow_45_signatures(catalog: XidCatalog) -> list[dict[str, Any]]:
    """Xid 45 that names the Xid it follows (`caused by previous Xid N`): NVIDIA's rule for an Xid 45
    that is not alone is to follow the other Xid, so it drains exactly when that Xid's bucket does,
    even where the excerpt lost the other Xid's own line. For an NVLink5 Xid (144-150) the bucket is
    in the decode sheet: it drains when every row of the sheet whose local effect is an application
    crash (Xid 45) is RESET_GPU: 144; not 145, where some of those rows defer to Xid 154, nor 149 and
    150, whose rows name no Xid 45."""
    by_category: dict[str, list[int]] = {}
    undecided: list[int] = []
    for row in catalog.rows:
        decision = catalog.bucket(row.immediate).decision
        crashing = {d.immediate for d in catalog.decode if d.xid == row.code and d.kills_channels}
        if decision is Decision.DRAIN or (decision is Decision.CONTEXT and crashing == {"RESET_GPU"}):
            by_category.setdefault(_weighing(catalog, row)["category"], []).append(row.code)
        elif decision is Decision.CONTEXT and catalog.decode and any(d.xid == row.code for d in catalog.decode):
            undecided.append(row.code)
    names = {"nvlink": ("xid-45-after-nvlink", "node", "an NVLink fault on this node"),
             "gpu-hardware": ("xid-45-after-gpu-fault", "gpu", "that GPU's fault")}
    out = []
    for category, codes in sorted(by_category.items()):
        sig_id, culprit, cause = names[category]
        alternatives = "|".join(str(c) for c in codes)
        out.append({
            "id": sig_id, "family": "xid", "category": category, "culprit_kind": culprit, "precedence": 94,
            "pattern": rf"{{xid}}(?P<xid>45)\b.*caused by previous Xid (?P<code>{alternatives})\b",
            "literals": ["caused by previous Xid"], "restart": True, "drain": True,
            "source": catalog.source(f"{catalog.section}, Xid 45 (WORKFLOW_XID_45; not solo: follow the other Xid)"),
            "explanation": (f"Xid 45 caused by an earlier Xid whose bucket drains the node: the channels were torn "
                            f"down by {cause}, even where the earlier Xid's own line is not in the excerpt."),
        })
    if undecided:
        # The decode sheet decides these only from the earlier Xid's own words, which an Xid 45 does
        # not repeat: the NVLink fault ended the job (restart it), but whether the GPU needs a reset
        # is the earlier line's (or an Xid 154's) to say, so this alone drains nothing.
        alternatives = "|".join(str(c) for c in undecided)
        out.append({
            "id": "xid-45-after-nvlink5", "family": "xid", "category": "nvlink", "culprit_kind": "node",
            "precedence": 84,
            "pattern": rf"{{xid}}(?P<xid>45)\b.*caused by previous Xid (?P<code>{alternatives})\b",
            "literals": ["caused by previous Xid"], "restart": True, "drain": False,
            "source": catalog.source(f"{catalog.section}, Xid 45 (WORKFLOW_XID_45; not solo: follow the other Xid); "
                                     f"{catalog.decode_section}"),
            "explanation": ("Xid 45 caused by an earlier NVLink5 Xid: an NVLink event tore down the job's channels, "
                            "so restart it. NVIDIA's decode sheet grades that Xid from its own line (or from the "
                            "Xid 154 printed with it), which this one does not carry: on its own it drains nothing."),
        })
    return out


def signature_entries(catalog: XidCatalog) -> list[dict[str, Any]]:
    """Every signature the table generates, in table order, then the decode and the Xid 45 rules."""
    return ([row_signature(catalog, row) for row in catalog.rows] + decode_signatures(catalog)
            + follow_45_signatures(catalog))
