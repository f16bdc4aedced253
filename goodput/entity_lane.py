"""The task queue the cluster-wide entities live on, beside the incidents' own.

Every incident consults its cluster's node memory and track record: one workflow each for the
whole cluster, which answer an update only through a workflow task of their own. On the shared
queue that task waits behind every incident's tasks, so in a storm of 100 incidents the entity
answered a consult after ~1 s, and after ~7 s (p99 40 s) in one of 500 (docs/scaling.md, #29): the
storm queued behind itself. On a queue of their own, polled by the same worker processes, the
entities' tasks never wait behind an incident's.
"""

from __future__ import annotations

ENTITY_QUEUE_SUFFIX = "-entities"


def entity_queue(task_queue: str) -> str:
    """The entities' queue of the service whose incidents run on `task_queue` (itself if it is one)."""
    return task_queue if task_queue.endswith(ENTITY_QUEUE_SUFFIX) else f"{task_queue}{ENTITY_QUEUE_SUFFIX}"
