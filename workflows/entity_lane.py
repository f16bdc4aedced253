"""Moving a cluster-wide entity onto the entities' own queue when it continues as new.

New entities start there (goodput.entity_lane); one that a deployment started on the shared queue
before the lane existed moves at its next continue-as-new, so its updates stop waiting behind every
incident's workflow tasks without an operator doing anything. Behind the patch `entity-lane`: a run
recorded before it replays as it was, continuing on its own queue.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.entity_lane import entity_queue


def next_run_queue() -> str | None:
    """The queue for this entity's next run: the entities' own when this run is elsewhere, None
    (the run's own queue) when it is already there or the history predates the lane."""
    here = workflow.info().task_queue
    lane = entity_queue(here)
    if lane == here or not workflow.patched("entity-lane"):
        return None
    return lane
