"""NodeMemoryWorkflow: one long-lived entity workflow per cluster that remembers which nodes failed whom.

Recovery workflows report each incident's allocation (an update, through the `consult_node_memory`
activity's update-with-start) and get back what the cluster's history says about those nodes
(goodput.diagnose.node_memory). Being a workflow, the memory survives every crash of workers and
controller, its every verdict is in history, and `goodput nodes` reads it with a query. It
continues-as-new to keep that history short; the state it carries is bounded by the policy's window.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.diagnose.node_memory import (
        MemoryVerdict,
        NodeMemoryPolicy,
        NodeMemoryState,
        NodeStanding,
        Observation,
        consult,
        standing,
    )
    from goodput.models import Frozen
    from workflows.entity_lane import next_run_queue
    from workflows.update_batch import check_batch

CONTINUE_AS_NEW_AFTER = 500


class NodeMemoryStart(Frozen):
    cluster: str
    policy: NodeMemoryPolicy = NodeMemoryPolicy()
    state: NodeMemoryState = NodeMemoryState()


class ConsultRequest(Frozen):
    observation: Observation
    # The consulting incident's policy: an incident is judged by the rules it started with.
    policy: NodeMemoryPolicy = NodeMemoryPolicy()


class ConsultBatch(Frozen):
    """Several incidents' consultations in one update (activities.adapters.update_batch)."""

    requests: tuple[ConsultRequest, ...]


def node_memory_workflow_id(cluster: str) -> str:
    return f"node-memory-{cluster}"


@workflow.defn
class NodeMemoryWorkflow:
    @workflow.init
    def __init__(self, start: NodeMemoryStart) -> None:
        self._start = start
        self._state = start.state
        self._consults = 0

    @workflow.run
    async def run(self, start: NodeMemoryStart) -> None:
        await workflow.wait_condition(
            lambda: self._consults >= CONTINUE_AS_NEW_AFTER or workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(start.model_copy(update={"state": self._state}), task_queue=next_run_queue())

    @workflow.update
    def consult(self, request: ConsultRequest) -> MemoryVerdict:
        return self._consult(request)

    def _consult(self, request: ConsultRequest) -> MemoryVerdict:
        self._state, verdict = consult(self._state, request.observation, workflow.now(), request.policy)
        self._consults += 1
        return verdict

    @workflow.update
    def consult_many(self, batch: ConsultBatch) -> tuple[MemoryVerdict, ...]:
        """`consult` for each request in order: the same verdicts as one update each."""
        return tuple(self._consult(request) for request in batch.requests)

    @consult_many.validator
    def _bounded(self, batch: ConsultBatch) -> None:
        check_batch(len(batch.requests), "consultations")

    @workflow.query
    def standing(self) -> tuple[NodeStanding, ...]:
        return standing(self._state, workflow.now(), self._start.policy)
