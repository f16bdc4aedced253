"""Naming a culprit from lines other than the deciding one.

The deciding line often names the wrong party or none: torchrun's summary names its root-cause rank
apart from the teardown exits, Slurm's list of terminated tasks leaves out the one that failed, and
a local port error that lost its host is pointed at by its peers' completion errors. The name found
this way is inferred, so it comes with the line it was placed from, why, and what would confirm it.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.diagnose.signatures.circumstances import Circumstances
from goodput.diagnose.signatures.locate import Locator, node_of
from goodput.diagnose.signatures.model import Match
from goodput.diagnose.signatures.naming import clip
from goodput.diagnose.signatures.teardown import Teardown
from goodput.models import Category, CulpritKind

# A local port error names no host when the log lost it; the peers' completion errors point at it.
_PORT_ERROR_ID = "nccl-ib-port-error"

# Which line placed the culprit, why, and what would confirm it (None: nothing needs confirming).
Placement = tuple[int, str, str | None]


def placed(lead: Match, kind: CulpritKind, culprit: str | None, host: str | None, rank: int | None, *,
           locator: Locator, circumstances: Circumstances, teardown: Teardown, hits: Sequence[Match]
           ) -> tuple[CulpritKind, str | None, str | None, int | None, Placement | None]:
    """A culprit other lines name better than the deciding one: torchrun's root cause over a rank
    its summary lists as teardown, the one task Slurm did not terminate, the node whose dead port
    its peers' completion errors point at. The last value says which line, why, and what would
    confirm a culprit that is inferred rather than stated."""
    if kind in (CulpritKind.APP, CulpritKind.RANK):
        root = locator.root_cause
        if root is not None and (rank is None or teardown.in_other_failures(lead.line_no)):
            return kind, f"rank {root[0]}", node_of(root[1]) or host, root[0], (
                lead.line_no, f"torchrun's summary names rank {root[0]} as the first observed failure; "
                              "the other exits it lists are the agent tearing the group down.", None)
        failed = circumstances.failed_task() if rank is None else None
        if failed is not None:
            return kind, f"rank {failed[0]}", node_of(failed[1]) or host, failed[0], (
                lead.line_no, f"task {failed[0]} is the only one missing from the tasks Slurm terminated "
                              "after the failure, so it is the task that failed.",
                f"task {failed[0]}'s own output (its last lines before it exited) and sacct's record of "
                "the step confirm which task failed first")
    if lead.signature.id == _PORT_ERROR_ID and host is None:
        peers = {m.groups["peer"] for m in hits
                 if m.groups.get("peer") and m.signature.category is Category.NETWORK}
        if len(peers) == 1:
            node = node_of(clip(peers.pop()))
            return CulpritKind.NODE, node, node, rank, (
                lead.line_no, f"the port error's own host is not in the log, but its peers' errors all "
                              f"point at {node}.",
                f"the kernel log or `ibstat` of {node} showing the port going down confirms it")
        # A link event that no line ties to one host: the fabric between them is the suspect.
        return CulpritKind.NETWORK, culprit, host, rank, None
    return kind, culprit, host, rank, None
