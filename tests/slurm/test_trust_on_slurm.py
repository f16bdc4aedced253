"""Earned autonomy on the live lab: a rule cancelled as wrong in 3 of its last 5 recommendations
falls back to approval in an autonomous partition — the real job is left alone while it waits —
and an operator's pin to autonomous makes the next incident act on Slurm again.

One real job; each incident is a job attempt of it with a graded (`high`) hang verdict, so the
rule is `category:hang` and the plan only requeues (nothing is drained on the shared lab).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import Anomaly, AnomalyKind, Category, Mode, OperatorDecision
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.recover.trust import AutonomyPolicy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import anomaly, inject, wait_for_state
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(600)]

# No decisions needed: a fresh rule is trusted until operators say it is wrong.
POLICY = Policy(mode=Mode.AUTONOMOUS, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                verify_running_timeout_s=240, approval_timeout_s=300,
                autonomy=AutonomyPolicy(earned=True, min_decisions=0, min_agreement=0.0),
                exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=False))  # the record, not the second signal


async def test_three_wrong_of_five_fall_back_to_approval_and_a_pin_overrides(lab: Lab, client: Client,
                                                                             task_queue: str) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    job_id = lab.sbatch("--comment=goodput:opt-in", "--requeue", "--output=/dev/null", "--wrap=sleep 600")
    await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=30,
                     what=f"job {job_id} to run")
    service = TemporalIncidentService(client, task_queue)

    def hang(attempt: int) -> Anomaly:
        a = anomaly(job_id, kind=AnomalyKind.HANG, nodes=(), category=Category.HANG, cluster=cluster,
                    attempt=attempt)
        return a.model_copy(update={"confidence": "high"})

    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY):
        for attempt in (0, 1, 2):  # an operator cancels three recommendations as wrong
            incident = await inject(client, task_queue, hang(attempt), POLICY, Mode.APPROVE)
            await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL, timeout_s=60)
            await service.decide(incident, Decision(verb=DecisionVerb.CANCEL, by=OperatorDecision(
                who="carol", reason="wrong-diagnosis: the job was paused by its owner")))

        fallback = await inject(client, task_queue, hang(3), POLICY, Mode.AUTONOMOUS)
        waiting = await wait_for_state(client, fallback, IncidentState.AWAITING_APPROVAL, timeout_s=60)
        assert (await backend.get_job(job_id)).restart_count == 0  # Slurm untouched while it waits
        await service.decide(fallback, Decision(verb=DecisionVerb.CANCEL,
                                                by=OperatorDecision(who="carol", reason="not-needed: fine")))

        await service.trust_pin(cluster, "category:hang", Mode.AUTONOMOUS,
                                OperatorDecision(who="dave", reason="owner stopped pausing"), POLICY.autonomy)
        pinned = await inject(client, task_queue, hang(4), POLICY, Mode.AUTONOMOUS)
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, pinned)
        acted = await asyncio.wait_for(handle.result(), timeout=300)
    lab.run("scancel", job_id)
    assert waiting.mode is Mode.APPROVE
    assert any("cancelled as wrong in 3 of its last 5 recommendations" in e.detail for e in waiting.timeline)
    assert acted.decision is None and any(a.startswith("requeued") for a in acted.actions_done), acted.timeline
