"""What a resumed job waiting for capacity is missing, in words an operator can act on.

Excluding drained and distrusted nodes is right, and it can leave a job too few nodes to start.
The recovery waits for capacity rather than failing, and the wait is durable. But "PENDING
(Resources)" for an hour tells the on-call nothing. This says how many nodes the job can use
(not excluded, not drained or down), how many of those are free right now, and how many
the job's exclusions (goodput's and its own) took away. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from goodput.scheduler import NodeInfo

_UNUSABLE = ("DOWN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "POWER", "FUTURE", "MAINT", "REBOOT")


def usable(node: NodeInfo) -> bool:
    words = [node.state.upper(), *(f.upper() for f in node.flags)]
    return not node.drained and not any(w.startswith(u) for w in words for u in _UNUSABLE)


def capacity_note(nodes: Sequence[NodeInfo], excluded: Collection[str], needed: int | None) -> str:
    """One line: usable nodes not excluded (free now), what is excluded or out of service, and
    how many the job needs when known."""
    candidates = [n for n in nodes if usable(n) and n.name not in excluded]
    free = [n for n in candidates if n.state.upper().startswith("IDLE")]
    out_of_service = [n for n in nodes if not usable(n)]
    ours = sorted(set(excluded) & {n.name for n in nodes})
    parts = [f"{len(candidates)} usable node(s) not excluded, {len(free)} free now"]
    if needed:
        parts.insert(0, f"needs {needed} node(s)")
        if len(candidates) < needed:
            parts.append(f"too few even when all are free: {needed - len(candidates)} short")
    parts.append(f"{len(out_of_service)} drained or down")
    if ours:
        parts.append(f"{len(ours)} excluded for this job ({', '.join(ours[:8])}{', …' if len(ours) > 8 else ''})")
    return "; ".join(parts)
