"""Naming the culprit of a verdict, as specifically as the log allows.

The deciding signature says what kind of thing is to blame (a GPU, a node, a rank, the
application, a path, a link); the lines say which one. This module turns the supporting hits of
a verdict into that name, degrading as facts run out: host and GPU, then host, then "the GPU of
rank 3", then the kind alone. It lives apart from the verdict builder because both the builder's
rules and the cross-line rules need the same answers (who printed a timeout, which ranks a desync
report lists), and because the builder is long enough already.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.diagnose.signatures.hostshape import hcas
from goodput.diagnose.signatures.locate import Locator
from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, Match
from goodput.models import Category, CulpritKind
from goodput.untrusted_text import LinearRegex, bounded_int, utf8

MAX_NAMED_RANKS = 16
MAX_NAME_CHARS = 512
# Monitors that fire on every rank of a stalled collective, the waiting ranks as much as the one
# they wait for: when more than one rank reports, none of them is singled out.
EVERY_RANK_MONITORS = frozenset({"nccl-heartbeat-stuck", "nvrx-heartbeat-timeout", "nvrx-section-timeout"})
_RANK_IN_MESSAGE = LinearRegex(r"\bRank (\d{1,9})\]")

# (kind, display name, host, GPU, rank)
Named = tuple[CulpritKind, str | None, str | None, str | None, int | None]


def clip(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= MAX_NAME_CHARS else text[:MAX_NAME_CHARS] + "…[truncated]"


def rank_list(ranks: str) -> tuple[list[str], int | None]:
    """The ranks a report names (the first `MAX_NAMED_RANKS`; a range `8-15` stays one entry) and
    the first one as a number."""
    listed = [r.strip() for r in ranks.split(",", MAX_NAMED_RANKS)[:MAX_NAMED_RANKS] if r.strip()]
    listed = [r for r in listed if _rank_range(r) is not None]
    first = _rank_range(listed[0]) if listed else None
    return listed, first[0] if first else None


def _rank_range(text: str) -> tuple[int, int] | None:
    """`8` or `8-15` as (first, last); None for anything else (a reversed or absurd range)."""
    low, dash, high = text.partition("-")
    first = bounded_int(low.strip(), max_digits=MAX_RANK_DIGITS)
    last = bounded_int(high.strip(), max_digits=MAX_RANK_DIGITS) if dash else first
    if first is None or last is None or last < first:
        return None
    return first, last


def _hca_label(devices: list[tuple[str, str | None]]) -> str:
    return "HCA " + ", ".join(f"{d} port {p}" if p else d for d, p in devices)


def reporting_rank(match: Match) -> int | None:
    """The global rank that printed a line: the launcher prefix, else the message's own `[Rank N]`."""
    if match.context.rank is not None:
        return match.context.rank
    found = _RANK_IN_MESSAGE.search(utf8(match.text))
    rank = bounded_int(found.group(1), max_digits=MAX_RANK_DIGITS) if found else None
    return rank if rank is not None else match.context.task


def pick(supporting: Sequence[Match], locator: Locator) -> Named:
    """The culprit of the deciding hits: the first of them that names one, else the kind alone."""
    lead = supporting[0].signature
    want = lead.culprit_kind
    if want is CulpritKind.UNKNOWN:
        if lead.category is Category.NETWORK:
            # A network verdict blames the path between the hosts even when its line names neither end
            # (NCCL's "remote process exited or there was a network error"): the category already says
            # so, and "unknown" would contradict it. A peer that died first is another verdict, made
            # when its own error is in the log.
            return CulpritKind.NETWORK, None, None, None, None
        return CulpritKind.UNKNOWN, None, None, None, None
    monitors = [m for m in supporting if m.signature.id in EVERY_RANK_MONITORS]
    if len({r for r in (reporting_rank(m) for m in monitors) if r is not None}) > 1:
        # Several ranks' monitors firing at once is a job-wide stall: the ranks they name are the
        # ones waiting, not the one they wait for.
        supporting = [m for m in supporting if m.signature.id not in EVERY_RANK_MONITORS]
    best: Named = (CulpritKind.UNKNOWN, None, None, None, None)
    # Only a line of the same kind of fault names it: the peer reporting errors toward a dead port is
    # the far end of the link, not the node whose port died.
    for index, m in enumerate(m for m in supporting if m.signature.culprit_kind is want):
        named = name(want, m, locator)
        if named[1] is not None:
            return named
        if index == 0:
            best = named
    return best


def name(want: CulpritKind, m: Match, locator: Locator) -> Named:
    """The culprit one hit names, of the kind its signature wants, as specific as the log allows."""
    g = m.groups
    host = locator.host_of(m)
    rank = m.rank
    listed, first = rank_list(g.get("ranks", ""))
    if want is CulpritKind.APP:
        if len(listed) > 1:
            return CulpritKind.APP, "ranks " + ", ".join(listed), host, None, rank
        if first is not None:
            rank = first
        return CulpritKind.APP, (f"rank {rank}" if rank is not None else None), host, None, rank
    if want is CulpritKind.STORAGE:
        path = g.get("path")
        return CulpritKind.STORAGE, clip(path) if path else None, host, None, rank
    if want is CulpritKind.NETWORK:
        peer = clip(g["peer"]) if g.get("peer") else None
        named_peer = locator.name_of(peer) if peer else None
        if peer and named_peer and named_peer not in peer:
            peer = f"{named_peer} ({peer})"  # the name the log itself pairs that address with
        devices = hcas(m.text) if host else []
        end = f"{host} {_hca_label(devices)}" if host and devices else host
        label = f"{end} <-> {peer}" if end and peer else (end or peer)
        return CulpritKind.NETWORK, label, host, None, rank
    if want is CulpritKind.RANK and first is not None:
        label = f"rank {listed[0]}" if len(listed) == 1 and "-" not in listed[0] else "ranks " + ", ".join(listed)
        return CulpritKind.RANK, label, locator.node_of_rank(first), None, first
    pci = (g.get("pci") or locator.gpu_of(m)) if want is CulpritKind.GPU else None
    if pci:
        return CulpritKind.GPU, (f"{host} GPU {pci}" if host else f"GPU {pci}"), host, pci, rank
    if host and want is not CulpritKind.RANK:
        return CulpritKind.NODE, host, host, None, rank
    if rank is not None and want in (CulpritKind.GPU, CulpritKind.NODE):
        # The hardware of the rank that printed the error, on a host the log does not spell.
        return want, f"the {want} of rank {rank}", None, None, rank
    if rank is not None:
        return CulpritKind.RANK, f"rank {rank}", host, None, rank
    return want, None, host, None, rank
