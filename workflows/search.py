"""Search attributes that make incidents listable and filterable in the Temporal UI and CLI.

The names are registered on the dev server at start (`goodput up`) and by `goodput worker` on an
external cluster; the workflow upserts them as the incident moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from goodput.models import IncidentKey, Mode, Outcome
from goodput.recover.incident import AttributeResult
from goodput.recover.lifecycle import IncidentState

JOB_ID = SearchAttributeKey.for_keyword("GoodputJobId")
CLUSTER = SearchAttributeKey.for_keyword("GoodputCluster")
CATEGORY = SearchAttributeKey.for_keyword("GoodputCategory")
CULPRIT_NODES = SearchAttributeKey.for_keyword_list("GoodputCulpritNodes")
MODE = SearchAttributeKey.for_keyword("GoodputMode")
OUTCOME = SearchAttributeKey.for_keyword("GoodputOutcome")
STATE = SearchAttributeKey.for_keyword("GoodputState")
PARTITION = SearchAttributeKey.for_keyword("GoodputPartition")
# The node incidents (one fault, many jobs) a job incident is linked to: lists a fault's jobs.
NODE_INCIDENTS = SearchAttributeKey.for_keyword_list("GoodputNodeIncidents")

ALL_KEYS: tuple[SearchAttributeKey[str] | SearchAttributeKey[Sequence[str]], ...] = (
    JOB_ID, CLUSTER, CATEGORY, CULPRIT_NODES, MODE, OUTCOME, STATE, PARTITION, NODE_INCIDENTS)


def at_start(key: IncidentKey, mode: Mode) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(JOB_ID, key.job_id),
        SearchAttributePair(CLUSTER, key.cluster),
        SearchAttributePair(MODE, mode.value),
        SearchAttributePair(STATE, IncidentState.DETECTED.value),
    ])


def upsert(key: IncidentKey, state: IncidentState, mode: Mode, attributed: AttributeResult | None,
           outcome: Outcome | None, node_incidents: Sequence[str] = ()) -> None:
    workflow.upsert_search_attributes(updates(key, state, mode, attributed, outcome, node_incidents))


def updates(key: IncidentKey, state: IncidentState, mode: Mode, attributed: AttributeResult | None,
            outcome: Outcome | None, node_incidents: Sequence[str] = ()) -> list[SearchAttributeUpdate[Any]]:
    """Every attribute the incident lists under now (one upsert sets them all)."""
    wanted: list[SearchAttributeUpdate[Any]] = [JOB_ID.value_set(key.job_id), CLUSTER.value_set(key.cluster),
                                                 STATE.value_set(state.value), MODE.value_set(mode.value)]
    if attributed is not None:
        wanted.append(CATEGORY.value_set(attributed.attribution.category.value))
        nodes = list(attributed.attribution.culprit_nodes)
        if nodes:
            wanted.append(CULPRIT_NODES.value_set(nodes))
        if attributed.job is not None and attributed.job.partition:
            wanted.append(PARTITION.value_set(attributed.job.partition))
    if outcome is not None:
        wanted.append(OUTCOME.value_set(outcome.value))
    if node_incidents:  # only when linked: incidents from before the link replay the same upserts
        wanted.append(NODE_INCIDENTS.value_set(list(node_incidents)))
    return wanted


class OnePerTask:
    """One upsert per workflow task (the straight path, #29): the last values asked for, sent once
    the workflow's code has run as far as this task takes it. The workflow's event loop runs the
    callback before the task ends, so what the incident lists under at each task's end is what
    an upsert per change would have left."""

    def __init__(self) -> None:
        self._owed: list[SearchAttributeUpdate[Any]] | None = None

    def ask(self, wanted: list[SearchAttributeUpdate[Any]]) -> None:
        if self._owed is None:
            asyncio.get_running_loop().call_soon(self._send)
        self._owed = wanted

    def _send(self) -> None:
        if self._owed is not None:
            workflow.upsert_search_attributes(self._owed)
            self._owed = None
