"""Where an incident finds the agents' in-memory stores: a task queue only the liveness process polls.

The stack request table and the GPU sample store live in the memory of the process that serves the
agents' heartbeat endpoint (`[liveness]`). On a single host that is the one worker; under the Helm
chart it is its own pod beside workers that hold neither. An activity on the shared task queue
runs on whichever worker polls first, so it would find the stores only by chance. The liveness
process therefore also polls `<task_queue>-liveness`, and every activity that reads or writes
those stores runs there. Before scheduling one, a workflow asks where the stores are
(`LivenessRoute`): scheduling on a queue nobody polls would make every hang wait out its bound.
"""

from __future__ import annotations

from goodput.models import Frozen

LIVENESS_QUEUE_SUFFIX = "-liveness"


def liveness_queue(task_queue: str) -> str:
    """The queue only the liveness process polls, named after the service's own."""
    return f"{task_queue}{LIVENESS_QUEUE_SUFFIX}"


class LivenessRoute(Frozen):
    """Where to schedule what reads the agents' stores; `queue` None: nowhere, and `note` says why."""

    queue: str | None = None
    note: str = ""


def no_liveness(queue: str) -> LivenessRoute:
    return LivenessRoute(note=f"no process serves {queue} (the agents' heartbeat endpoint, "
                              f"[liveness] enabled = true, runs in no worker)")
