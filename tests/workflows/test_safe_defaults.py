"""The defaults are the safe ones: an autonomous partition acts alone only on a rule that earned it,
and a drain needs a second signal (issue #28). A policy that says nothing about either (what a
site gets without `[policy.autonomy]` or `[policy.exclude_before_drain]`) waits for an operator's
approval on a rule with no record, and once approved excludes a node only the job's log blames
instead of draining it. A snapshot recorded before either setting existed keeps both off."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from goodput.models import Mode, OperatorDecision
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, as_recorded
from goodput.recover.trust import AutonomyPolicy
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService

# FAST's timings with the shipped defaults of both gates.
DEFAULTS = FAST.model_copy(update={"autonomy": AutonomyPolicy(), "exclude_before_drain": ExcludeBeforeDrainPolicy()})


def test_both_gates_are_on_by_default_and_an_older_snapshot_keeps_them_off() -> None:
    assert Policy().autonomy.earned and Policy().exclude_before_drain.enabled
    older = Policy.model_validate_json(Policy().model_dump_json(exclude={"autonomy", "exclude_before_drain"}))
    assert not as_recorded(older).autonomy.earned and not as_recorded(older).exclude_before_drain.enabled
    assert as_recorded(Policy.model_validate_json(Policy().model_dump_json())) == Policy()


async def test_by_default_an_unproven_rule_waits_and_the_approved_plan_excludes_instead_of_draining(
        client: Client, task_queue: str) -> None:
    cluster = f"safe{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue) as fake:
        incident = await inject(client, task_queue, anomaly(cluster=cluster), DEFAULTS, Mode.AUTONOMOUS)
        waiting = await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)
        assert fake.journal() == []
        assert any("rule autonomy approve: 0 operator decisions, 20 needed" in e.detail for e in waiting.timeline)
        await TemporalIncidentService(client, task_queue).decide(incident, Decision(
            verb=DecisionVerb.APPROVE, by=OperatorDecision(who="ops", reason="xid 79 seen, go")))
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert fake.journal("drain") == []
    assert report.plan is not None and report.plan.suspect_nodes == ("node2",)
    assert (await fake.get_job("1001")).excluded_nodes == ("node2",)
