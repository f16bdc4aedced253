"""The one shape every Slurm backend's state change takes: validate, read, no-op check, act, result.

Draining, resuming, holding, releasing and cancelling are idempotent in every backend (CLI, SSH,
REST, pyslurm): read what Slurm holds now, ask `goodput.slurm.rules` whether the change is
already made (or is someone else's to make), and only then send it. Written once here, a backend
supplies only how it reads and how it acts, so no backend can act before checking, or report a
change it skipped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from goodput.identifiers import validate_node_name, validate_reason
from goodput.scheduler import ActionResult, NodeInfo

S = TypeVar("S")


async def act_unless_done(read: Callable[[], Awaitable[S]], noop: Callable[[S], ActionResult | None],
                          act: Callable[[S], Awaitable[object]], done: str) -> ActionResult:
    """Read the current state; return the no-op result when `noop` gives one; else act and say `done`.

    `read` validates what it is given (a job's read refuses jobs that have not opted in), so an
    invalid or refused target never reaches `act`.
    """
    current = await read()
    skip = noop(current)
    if skip is not None:
        return skip
    await act(current)
    return ActionResult(changed=True, detail=done)


async def change_node(name: str, reason: str, *, read: Callable[[str], Awaitable[NodeInfo]],
                      noop: Callable[[NodeInfo, str], ActionResult | None],
                      act: Callable[[], Awaitable[object]], done: str) -> ActionResult:
    """A drain or resume of node `name`: both are validated before anything is read or sent."""
    validate_node_name(name)
    validate_reason(reason)
    return await act_unless_done(lambda: read(name), lambda node: noop(node, reason), lambda _: act(),
                                 f"{done} {name}")
