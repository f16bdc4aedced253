"""Weighing the hits of one log into a verdict: what failed, who is to blame, restart? drain?

Rules, in order: a root cause beats a knock-on effect beats an informational hit; among equals the
higher catalogue precedence wins (hardware explains software symptoms); among those the earliest
line wins (the first rank to fail is the culprit, the others die of the teardown). Application
errors printed after Slurm ended the job (time limit, preemption, cancel) are teardown noise.
The culprit is named whenever the log lets a careful reader name it, and nothing is drained
unless a host or GPU can be named and the deciding signature calls for it. Every number taken
from a line is bounded before it is converted, and every name shown is clipped: a hostile line
changes nothing but its own hit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from pydantic import Field

from goodput.diagnose.signatures.locate import Locator
from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, ROLE_ORDER, Match, Role, Signature
from goodput.models import Category, CulpritKind, Frozen
from goodput.untrusted_text import LinearRegex, bounded_int, utf8

MAX_HITS_PER_SIGNATURE = 20
MAX_EVIDENCE = 8
MAX_EVIDENCE_CHARS = 512
MAX_TIMEOUTS = 1000
MAX_NAMED_RANKS = 16
# The culprit offline when the log does not spell its host: whoever produced the log.
SOURCE_NODE = "the node that produced this log"
_TIMEOUT_ID = "nccl-watchdog-timeout"
_MISMATCH_ID = "nccl-collective-mismatch"
_RANK_IN_MESSAGE = LinearRegex(r"\[Rank (\d+)\] Watchdog caught")
# Categories whose lines after a Slurm termination banner are consequences of the termination.
_TEARDOWN = frozenset({Category.APP_ERROR, Category.OOM, Category.NCCL_TIMEOUT, Category.NETWORK,
                       Category.HANG, Category.STORAGE, Category.UNKNOWN})


class Evidence(Frozen):
    line: int = Field(ge=0)
    text: str


class Verdict(Frozen):
    """The classification of one log; the JSON of `goodput classify --json` minus the path."""

    category: Category
    culprit_kind: CulpritKind
    culprit: str | None = None
    restart: bool
    drain: bool
    signatures: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    explanation: str
    # Machine-readable parts of the culprit, for building anomalies; not in the CLI's JSON.
    host: str | None = None
    gpu: str | None = None
    rank: int | None = None
    catalogue_version: int = 1


def _clip(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= MAX_EVIDENCE_CHARS else text[:MAX_EVIDENCE_CHARS] + "…[truncated]"


def _rank_list(ranks: str) -> tuple[list[str], int | None]:
    """The ranks a desync report names (the first `MAX_NAMED_RANKS`) and the first one as a number."""
    listed = [r.strip() for r in ranks.split(",", MAX_NAMED_RANKS)[:MAX_NAMED_RANKS] if r.strip()]
    listed = [r for r in listed if bounded_int(r, max_digits=MAX_RANK_DIGITS) is not None]
    return listed, bounded_int(listed[0], max_digits=MAX_RANK_DIGITS) if listed else None


class VerdictBuilder:
    """Consumes hits in line order (streaming, bounded memory) and produces one verdict."""

    def __init__(self, catalogue_version: int = 1, *, mismatch: Signature | None = None) -> None:
        """`mismatch`: the collective-mismatch entry to synthesise when timeouts disagree (by default
        the packaged catalogue's)."""
        self.catalogue_version = catalogue_version
        self.locator = Locator()
        self._hits: list[Match] = []
        self._per_sig: dict[str, int] = {}
        self._terminated_at: int | None = None
        self._mismatch = mismatch
        self._timeouts: list[Match] = []

    def add(self, match: Match) -> None:
        match = self.locator.observe(match)
        sig = match.signature
        if sig.terminates and self._terminated_at is None:
            self._terminated_at = match.line_no
        if sig.role is Role.LOCATOR:
            return
        if sig.id == _TIMEOUT_ID and len(self._timeouts) < MAX_TIMEOUTS:
            self._timeouts.append(match)
        count = self._per_sig.get(sig.id, 0)
        self._per_sig[sig.id] = count + 1
        if count < MAX_HITS_PER_SIGNATURE:
            if len(match.text) > 2 * MAX_EVIDENCE_CHARS:
                # Only a clipped excerpt is ever shown; never hold thousands of 64 KiB lines.
                match = dataclasses.replace(match, text=match.text[:2 * MAX_EVIDENCE_CHARS])
            self._hits.append(match)

    def add_all(self, matches: Iterable[Match]) -> VerdictBuilder:
        for m in matches:
            self.add(m)
        return self

    def role_of(self, match: Match) -> Role:
        sig = match.signature
        if (self._terminated_at is not None and match.line_no > self._terminated_at
                and not sig.terminates and sig.role is Role.ROOT and sig.category in _TEARDOWN):
            return Role.KNOCK_ON
        return sig.role

    def _key(self, match: Match) -> tuple[int, int, int]:
        return (ROLE_ORDER[self.role_of(match)], match.signature.precedence, -match.line_no)

    def _collective_mismatch(self) -> Match | None:
        """Timeouts with one sequence number in one process group but different operations or sizes:
        the ranks ran different collectives, an application bug. The minority ranks are named."""
        signature = self._mismatch or _default_mismatch()
        if signature is None:
            return None
        groups: dict[tuple[str, str], dict[tuple[str, str], list[Match]]] = {}
        for m in self._timeouts:
            g = m.groups
            if "pg" not in g:
                continue  # without a process-group id, equal sequence numbers may be different groups
            variant = (g.get("op", ""), g.get("numel", ""))
            groups.setdefault((g.get("pg", ""), g.get("code", "")), {}).setdefault(variant, []).append(m)
        for variants in groups.values():
            if len(variants) < 2:
                continue
            odd = min(variants.values(), key=lambda ms: (len(ms), ms[0].line_no))
            ranks = sorted({r for r in (_reporting_rank(m) for m in odd) if r is not None})
            first = odd[0]
            extra = {"ranks": ", ".join(map(str, ranks))} if ranks else {}
            return dataclasses.replace(first, signature=signature, groups={**first.groups, **extra})
        return None

    def build(self) -> Verdict:
        mismatch = self._collective_mismatch()
        if mismatch is not None:
            self._hits.append(mismatch)
        if not self._hits:
            return Verdict(category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, restart=False,
                           drain=False, explanation="no known failure signature in the log",
                           catalogue_version=self.catalogue_version)
        ranked = sorted(self._hits, key=self._key, reverse=True)
        lead = ranked[0]
        lead_role = self.role_of(lead)
        sig = lead.signature
        supporting = [m for m in ranked
                      if m.signature.category == sig.category and self.role_of(m) is lead_role]
        kind, culprit, host, gpu, rank = self._culprit(supporting)
        # Whether the node must go is the signature's call; naming it is a separate question. A GPU
        # fault is printed on the GPU's own node, so a log that does not spell its host still says
        # which node: the one that produced it (live, the watcher or push stream knows which that
        # is, and attribution checks it is the job's). A node fault seen from elsewhere (Slurm's
        # NODE FAILURE banner on the batch host) names nothing, and nothing is drained for it.
        drain = sig.drain and (kind is CulpritKind.GPU or (kind is CulpritKind.NODE and culprit is not None))
        if drain and culprit is None:
            kind, culprit = CulpritKind.NODE, SOURCE_NODE
        # Everything that did not decide: weaker causes, consequences, informational hits.
        supporting_ids = {id(m) for m in supporting}
        consequences = [m for m in ranked if id(m) not in supporting_ids]
        signatures = tuple(dict.fromkeys(m.signature.id for m in ranked))
        evidence = self._evidence(lead, supporting, consequences)
        others = [h for h in dict.fromkeys(self.locator.host_of(m) for m in supporting) if h and h != host]
        explanation = self._explain(lead, lead_role, kind, culprit, host, drain, consequences)
        if others and kind in (CulpritKind.GPU, CulpritKind.NODE):
            explanation += f" The same kind of fault is also reported on {', '.join(others[:5])}."
        return Verdict(category=sig.category, culprit_kind=kind, culprit=culprit, restart=sig.restart,
                       drain=drain, signatures=signatures, evidence=evidence, explanation=explanation,
                       host=host, gpu=gpu, rank=rank, catalogue_version=self.catalogue_version)

    def _culprit(self, supporting: list[Match]
                 ) -> tuple[CulpritKind, str | None, str | None, str | None, int | None]:
        """Kind, display name, host, GPU and rank of the culprit, degrading as facts run out."""
        want = supporting[0].signature.culprit_kind
        if want is CulpritKind.UNKNOWN:
            return CulpritKind.UNKNOWN, None, None, None, None
        best: tuple[CulpritKind, str | None, str | None, str | None, int | None] | None = None
        for m in supporting:
            named = self._name(want, m)
            if named[1] is not None:
                return named
            best = best or named
        assert best is not None
        return best

    def _name(self, want: CulpritKind, m: Match
              ) -> tuple[CulpritKind, str | None, str | None, str | None, int | None]:
        g = m.groups
        host = self.locator.host_of(m)
        rank = m.rank
        listed, first = _rank_list(g.get("ranks", ""))
        if want is CulpritKind.APP:
            if len(listed) > 1:
                return CulpritKind.APP, "ranks " + ", ".join(listed), host, None, rank
            if first is not None:
                rank = first
            return CulpritKind.APP, (f"rank {rank}" if rank is not None else None), host, None, rank
        if want is CulpritKind.STORAGE:
            path = g.get("path")
            return CulpritKind.STORAGE, _clip(path) if path else None, host, None, rank
        if want is CulpritKind.NETWORK:
            peer = _clip(g["peer"]) if g.get("peer") else None
            name = f"{host} <-> {peer}" if host and peer else (host or peer)
            return CulpritKind.NETWORK, name, host, None, rank
        if want is CulpritKind.RANK and first is not None:
            label = f"rank {listed[0]}" if len(listed) == 1 else "ranks " + ", ".join(listed)
            return CulpritKind.RANK, label, self.locator.rank_host.get(first), None, first
        pci = (g.get("pci") or self.locator.gpu_of(m)) if want is CulpritKind.GPU else None
        if pci:
            return CulpritKind.GPU, (f"{host} GPU {pci}" if host else f"GPU {pci}"), host, pci, rank
        if host and want is not CulpritKind.RANK:
            return CulpritKind.NODE, host, host, None, rank
        if rank is not None:
            return CulpritKind.RANK, f"rank {rank}", host, None, rank
        return want, None, host, None, rank

    def _evidence(self, lead: Match, supporting: list[Match], consequences: list[Match]
                  ) -> tuple[Evidence, ...]:
        """The deciding line, a little support, then one line of each other signature, by rank."""
        chosen: dict[int, str] = {lead.line_no: lead.text}
        for m in supporting[1:3]:
            chosen.setdefault(m.line_no, m.text)
        seen: set[str] = set()
        for m in consequences:
            if len(chosen) >= MAX_EVIDENCE:
                break
            if m.signature.id not in seen:
                seen.add(m.signature.id)
                chosen.setdefault(m.line_no, m.text)
        return tuple(Evidence(line=n, text=_clip(t)) for n, t in sorted(chosen.items()))

    def _explain(self, lead: Match, role: Role, kind: CulpritKind, culprit: str | None,
                 host: str | None, drain: bool, consequences: list[Match]) -> str:
        sig = lead.signature
        parts = [f"{sig.category} ({sig.id}, line {lead.line_no}): {sig.explanation}"]
        if role is not Role.ROOT:
            parts.append(f"No root-cause signature was found; this is the strongest {role} evidence.")
        if culprit:
            where = f" on {host}" if host and host not in culprit else ""
            parts.append(f"Culprit: {culprit}{where} ({kind}).")
        elif kind not in (CulpritKind.UNKNOWN, CulpritKind.APP):
            parts.append(f"The log does not say which {kind} is at fault.")
        if sig.category in (Category.APP_ERROR, Category.OOM):
            parts.append("The application is at fault; no hardware is blamed.")
        if sig.drain and not drain:
            parts.append("No node is drained because the log does not name the failed node.")
        elif drain and host is None:
            parts.append("The log does not name the host: drain the node this log was taken from.")
        if any(self.role_of(m) is not m.signature.role for m in consequences):
            parts.append(f"Slurm ended the job at line {self._terminated_at}; errors after it are "
                         "treated as teardown.")
        if consequences:
            ids = ", ".join(dict.fromkeys(m.signature.id for m in consequences[:50]))
            parts.append(f"{len(consequences)} other line(s) are weaker evidence or consequences ({ids}).")
        return " ".join(parts)


def _reporting_rank(match: Match) -> int | None:
    """The global rank that printed a timeout: the launcher prefix, else the message's own `[Rank N]`."""
    if match.context.rank is not None:
        return match.context.rank
    found = _RANK_IN_MESSAGE.search(utf8(match.text))
    rank = bounded_int(found.group(1), max_digits=MAX_RANK_DIGITS) if found else None
    return rank if rank is not None else match.context.task


def _default_mismatch() -> Signature | None:
    from goodput.diagnose.signatures import default_catalogue  # the package imports this module's siblings

    return default_catalogue().get(_MISMATCH_ID)
