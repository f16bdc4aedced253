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
    """The ranks a desync report names (the first `MAX_NAMED_RANKS`) and the first one as a number."""
    listed = [r.strip() for r in ranks.split(",", MAX_NAMED_RANKS)[:MAX_NAMED_RANKS] if r.strip()]
    listed = [r for r in listed if bounded_int(r, max_digits=MAX_RANK_DIGITS) is not None]
    return listed, bounded_int(listed[0], max_digits=MAX_RANK_DIGITS) if listed else None


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
        label = f"{host} <-> {peer}" if host and peer else (host or peer)
        return CulpritKind.NETWORK, label, host, None, rank
    if want is CulpritKind.RANK and first is not None:
        label = f"rank {listed[0]}" if len(listed) == 1 else "ranks " + ", ".join(listed)
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
