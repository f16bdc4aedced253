"""How sure a verdict is, and what evidence would settle it when it is not.

An operator deciding whether to approve a drain needs more than a category: "Xid 79 on host
gpu-b17" and "every rank timed out in an all-reduce, nobody says why" are both verdicts, but only
the first is a fact. This module grades a verdict from the facts it was built on (was the
deciding line a cause or only a consequence, is the culprit named, do other causes compete) and,
below "high", names the next thing to look at. Pure: it reads the verdict's ingredients and
returns two values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from goodput.models import Category, CulpritKind


class Confidence(StrEnum):
    HIGH = "high"      # a cause is in the log and its culprit is named as specifically as needed
    MEDIUM = "medium"  # the cause is clear but who is to blame is not (or a rival cause is close)
    LOW = "low"        # only consequences, or nothing at all: the log does not settle it


@dataclass(frozen=True, slots=True)
class Ingredients:
    """What the verdict builder knew when it decided."""

    category: Category
    culprit_kind: CulpritKind
    culprit_named: bool         # a host, GPU, rank, path or peer is named (not "the node that produced this log")
    from_source_node: bool      # the culprit is the node that produced the log, unnamed
    root_cause: bool            # the deciding hit is a cause, not a consequence or an informational line
    any_hit: bool
    rival: Category | None      # another root cause of a different category that nearly won
    informational: bool = False  # only lines that never decide alone (corrected errors, recovered warnings)
    inferred: bool = False       # the culprit is inferred from what is missing (the rank that did not report)
    # What would confirm a culprit read off other lines than the deciding one (the task Slurm did
    # not terminate, the peer the completion errors point at); None when the culprit is stated.
    confirm: str | None = None
    # The deciding rule rests on a vendor's or the project's documented semantics (its `source`):
    # only then does the line settle what it means, rather than what threads usually meant by it.
    sourced: bool = False
    # The verdict drains a node the log does not name (a GPU named by PCI address only): the node
    # is whichever produced the log, which the log itself cannot say.
    drain_unplaced: bool = False
    # The deciding rule's source says what happened but not what the verdict needs (`settles = false`).
    unsettled: bool = False


_TIMEOUT_SETTLE = ("the flight recorder dump (TORCH_NCCL_TRACE_BUFFER_SIZE) or the desync report "
                   "(TORCH_NCCL_DESYNC_DEBUG=1) naming the rank that never joined, a stack dump "
                   "(py-spy) of that rank, and the kernel logs (Xid) of the job's nodes")
_HANG_SETTLE = ("a stack dump of every rank (py-spy dump, faulthandler) to see which rank is elsewhere, "
                "and the kernel logs (Xid) of the job's nodes")
_NOTHING_SETTLE = ("Slurm's record of the job (sacct State and ExitCode), the rest of its log, and the "
                   "kernel logs (Xid) of its nodes")


def _named_hardware_missing(f: Ingredients) -> bool:
    return f.culprit_kind in (CulpritKind.GPU, CulpritKind.NODE, CulpritKind.NETWORK) and not f.culprit_named


def _what_failed_missing(f: Ingredients) -> bool:
    return f.culprit_kind is CulpritKind.UNKNOWN and f.category is not Category.SCHEDULER_POLICY


_Rule = tuple[Callable[[Ingredients], bool], Confidence, Callable[[Ingredients], str]]

# Checked in order, the first that holds decides; each says what would settle the verdict.
_RULES: tuple[_Rule, ...] = (
    (lambda f: not f.any_hit, Confidence.LOW,
     lambda f: "nothing in this log explains a failure: " + _NOTHING_SETTLE),
    (lambda f: f.informational, Confidence.MEDIUM,
     lambda f: "only informational lines were found; if the job did fail, " + _NOTHING_SETTLE),
    (lambda f: not f.root_cause, Confidence.LOW,
     lambda f: ("only consequences were found (aborts, closing siblings, exit codes): the first error of "
                "the rank that failed first, in its own output, or " + _NOTHING_SETTLE)),
    (lambda f: f.category is Category.NCCL_TIMEOUT and not f.culprit_named, Confidence.LOW,
     lambda f: "the timeouts do not say which rank stopped: " + _TIMEOUT_SETTLE),
    (lambda f: f.category is Category.HANG and not f.culprit_named, Confidence.LOW,
     lambda f: "the log does not say which rank hung: " + _HANG_SETTLE),
    (lambda f: f.confirm is not None, Confidence.MEDIUM,
     lambda f: f.confirm or ""),
    (lambda f: f.inferred, Confidence.MEDIUM,
     lambda f: ("the culprit is the one rank that did not report the timeout; if the log is not every "
                "rank's, " + _TIMEOUT_SETTLE)),
    (lambda f: f.rival is not None and f.rival is not f.category, Confidence.MEDIUM,
     lambda f: (f"a {f.rival} cause is also in the log; its timestamps against this one's, and the "
                "kernel logs of the hosts involved, tell which came first")),
    (lambda f: f.from_source_node, Confidence.MEDIUM,
     lambda f: ("the log does not name its host: the watcher or push record that delivered it says "
                "which node produced it")),
    (_named_hardware_missing, Confidence.MEDIUM,
     lambda f: ("the log does not name the failed hardware: the kernel logs (Xid, link and port errors) "
                "of the job's nodes")),
    # A stall names where the job stopped (the rank the others waited for), never why: PyTorch's and
    # NCCL's own documents send the reader on to that rank's stack and its node's kernel log.
    (lambda f: f.category in (Category.HANG, Category.NCCL_TIMEOUT), Confidence.MEDIUM,
     lambda f: "the log says which rank stalled, not why: " + _HANG_SETTLE),
    (_what_failed_missing, Confidence.MEDIUM,
     lambda f: "the log says what kind of failure this is but not what failed: " + _NOTHING_SETTLE),
    (lambda f: f.unsettled, Confidence.MEDIUM,
     lambda f: ("the deciding line is a documented fact that does not settle this verdict (its "
                "explanation says what else it may mean): " + _NOTHING_SETTLE)),
    (lambda f: f.drain_unplaced, Confidence.MEDIUM,
     lambda f: ("the drain targets the node that produced this log, which the log does not name: the "
                "watcher or push record that delivered it says which node that is")),
    (lambda f: f.culprit_kind is CulpritKind.NETWORK, Confidence.MEDIUM,
     lambda f: ("a completion error seen from one end says the other end did not answer, not which end, "
                "link or setting failed, nor whether the connection ever carried data: the other end's "
                "log, both hosts' port state and counters (ibstat, perfquery), and NCCL's connection "
                "setup lines (NCCL_DEBUG=INFO)")),
    (lambda f: not f.sourced, Confidence.MEDIUM,
     lambda f: ("the deciding line's meaning rests on how such lines usually read, not on a vendor "
                "document: " + _NOTHING_SETTLE)),
)


def grade(facts: Ingredients) -> tuple[Confidence, str | None]:
    """The confidence of a verdict and, below HIGH, what would settle it."""
    for holds, level, settle in _RULES:
        if holds(facts):
            return level, settle(facts)
    return Confidence.HIGH, None
