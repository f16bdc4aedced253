"""What a verdict shows a reader: a few clipped evidence lines and a sentence-by-sentence explanation.

Kept apart from the weighing so that what is shown can change without touching what is decided.
Every line shown is clipped (`naming.clip`): a hostile 64 KiB line shows as a bounded excerpt.
"""

from __future__ import annotations

from pydantic import Field

from goodput.diagnose.signatures.model import Match, Role
from goodput.diagnose.signatures.naming import clip
from goodput.diagnose.signatures.teardown import Teardown
from goodput.models import Category, CulpritKind, Frozen

MAX_EVIDENCE = 8
MAX_EVIDENCE_CHARS = 512


class Evidence(Frozen):
    line: int = Field(ge=0)
    text: str


def evidence(lead: Match, supporting: list[Match], consequences: list[Match]) -> tuple[Evidence, ...]:
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
    return tuple(Evidence(line=n, text=clip(t)) for n, t in sorted(chosen.items()))


def explain(lead: Match, role: Role, kind: CulpritKind, culprit: str | None, host: str | None, drain: bool,
            consequences: list[Match], teardown: Teardown) -> str:
    """The verdict's explanation before the culprit-naming and restart sentences the builder appends."""
    sig = lead.signature
    parts = [f"{sig.category} ({sig.id}, line {lead.line_no}): {sig.explanation}"]
    if role is not Role.ROOT:
        parts.append(f"No root-cause signature was found; this is the strongest {role} evidence.")
    if culprit:
        where = f" on {host}" if host and host not in culprit else ""
        parts.append(f"Culprit: {culprit}{where} ({kind}).")
    elif kind not in (CulpritKind.UNKNOWN, CulpritKind.APP):
        parts.append(f"The log does not say which {'link' if kind is CulpritKind.NETWORK else kind} is at fault.")
    if sig.category in (Category.APP_ERROR, Category.OOM):
        parts.append("The application is at fault; no hardware is blamed.")
    if sig.drain and not drain:
        parts.append("No node is drained because the log does not name the failed node.")
    elif drain and host is None:
        parts.append("The log does not name the host: drain the node this log was taken from.")
    if any(teardown.in_other_failures(m.line_no) for m in consequences):
        parts.append("torchrun's summary lists other ranks' exits before its root cause; those are teardown.")
    terminated_at = teardown.terminated_at
    if terminated_at is not None and any(
            teardown.role_of(m) is not m.signature.role and m.line_no > terminated_at for m in consequences):
        parts.append(f"Slurm ended the job at line {terminated_at}; errors after it are "
                     "treated as teardown.")
    if consequences:
        ids = ", ".join(dict.fromkeys(m.signature.id for m in consequences[:50]))
        parts.append(f"{len(consequences)} other line(s) are weaker evidence or consequences ({ids}).")
    return " ".join(parts)
