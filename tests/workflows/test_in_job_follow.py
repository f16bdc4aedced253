"""An incident whose job's launcher restarted it in-job follows the job, and acts only when the
launcher gives up, asks not to be restarted (exit code 93) or the job ends (fake scheduler)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from goodput.models import ActionKind, AnomalyKind, Category, Mode, RestartEffect
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import JobState
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state

pytestmark = pytest.mark.temporal
S = IncidentState
FOLLOW = FAST.model_copy(update={"in_job_follow_s": 30.0, "coalesce_window_s": 0.5, "never_restart_grace_s": 1.0})


async def follow_then(client: Client, task_queue: str, later: RestartEffect | None, *,
                      job_state: JobState | None = None) -> tuple[IncidentReport, list[str]]:
    async with running_worker(client, task_queue) as fake:
        first = anomaly(kind=AnomalyKind.HANG, nodes=(), category=Category.HANG)
        incident = await inject(client, task_queue, first.model_copy(update={"restart_effect": RestartEffect.IN_JOB}),
                                FOLLOW, Mode.AUTONOMOUS)
        following = await wait_for_state(client, incident, S.FOLLOWING_LAUNCHER)
        assert following.plan is not None and [a.kind for a in following.plan.actions] == [ActionKind.NOTIFY]
        assert fake.journal() == []  # nothing done to the job the launcher is healing
        if job_state is not None:
            fake.set_job_state("1001", job_state)
        effect = later if later is not None else RestartEffect.NONE
        await inject(client, task_queue, anomaly(kind=AnomalyKind.JOB_FAILED, nodes=(), cluster=first.cluster)
                     .model_copy(update={"restart_effect": effect}), FOLLOW, Mode.AUTONOMOUS)
        report = await result(client, incident)
        return report, [e.op for e in fake.journal()]


async def test_the_launcher_giving_up_hands_the_restart_to_goodput(client: Client, task_queue: str) -> None:
    report, ops = await follow_then(client, task_queue, RestartEffect.GAVE_UP)
    assert report.state is S.RECOVERED, report.timeline
    assert ops == ["requeue"]
    states = [e.state for e in report.timeline]
    assert states.index(S.FOLLOWING_LAUNCHER) < states.index(S.RESUMING)
    assert any("restart effect now gave-up" in e.detail for e in report.timeline)


async def test_exit_93_while_following_stops_the_job_and_says_why(client: Client, task_queue: str) -> None:
    report, ops = await follow_then(client, task_queue, RestartEffect.NEVER)
    assert report.state is S.STOPPED and ops == ["cancel"]  # still running after its grace: stopped
    assert report.attribution is not None and report.attribution.restart_effect is RestartEffect.NEVER
    assert any("to end by itself" in e.detail for e in report.timeline)
    assert "asked not to be restarted" in report.timeline[-1].detail


async def test_a_job_that_asked_not_to_be_restarted_may_end_with_its_own_exit_code(
        client: Client, task_queue: str) -> None:
    policy = FOLLOW.model_copy(update={"never_restart_grace_s": 60.0})
    async with running_worker(client, task_queue) as fake:
        verdict = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.APP_ERROR)
        incident = await inject(client, task_queue, verdict.model_copy(update={"restart_effect": RestartEffect.NEVER}),
                                policy, Mode.AUTONOMOUS)
        await asyncio.sleep(1.5)  # past the coalesce window: waiting for the job to end
        fake.set_job_state("1001", JobState.FAILED, exit_code="93:0")
        ended = anomaly(kind=AnomalyKind.JOB_FAILED, nodes=(), cluster=verdict.cluster)
        await inject(client, task_queue, ended.model_copy(update={"restart_effect": RestartEffect.NEVER}), policy,
                     Mode.AUTONOMOUS)
        report = await result(client, incident)
        assert fake.journal() == []  # its launchers' exit code 93 stands; nothing to stop
    assert report.state is S.STOPPED and report.plan is not None
    assert [a.kind for a in report.plan.actions] == [ActionKind.NOTIFY]


async def test_a_job_that_ended_is_no_longer_restarted_by_its_launcher(client: Client, task_queue: str) -> None:
    report, ops = await follow_then(client, task_queue, None, job_state=JobState.FAILED)
    assert report.state is S.RECOVERED, report.timeline
    assert ops == ["requeue"]
    assert report.attribution is not None and "has since ended" in report.attribution.explanation


async def test_more_in_job_restarts_keep_following_until_the_window_passes(client: Client, task_queue: str) -> None:
    policy = FOLLOW.model_copy(update={"in_job_follow_s": 3.0})
    async with running_worker(client, task_queue) as fake:
        first = anomaly(kind=AnomalyKind.HANG, nodes=(), category=Category.HANG)
        incident = await inject(client, task_queue, first.model_copy(update={"restart_effect": RestartEffect.IN_JOB}),
                                policy, Mode.AUTONOMOUS)
        await wait_for_state(client, incident, S.FOLLOWING_LAUNCHER)
        again = anomaly(kind=AnomalyKind.CRASH, nodes=(), cluster=first.cluster)
        await inject(client, task_queue, again.model_copy(update={"restart_effect": RestartEffect.IN_JOB}), policy,
                     Mode.AUTONOMOUS)
        report = await result(client, incident)
        assert fake.journal() == []
    assert report.state is S.STOPPED and report.actions_done == ()
    assert any("still restarted in-job" in e.detail for e in report.timeline)
    assert "handled the failure in-job" in report.timeline[-1].detail


async def test_a_zero_window_closes_at_once_as_before(client: Client, task_queue: str) -> None:
    policy = FOLLOW.model_copy(update={"in_job_follow_s": 0.0})
    async with running_worker(client, task_queue) as fake:
        first = anomaly(kind=AnomalyKind.HANG, nodes=(), category=Category.HANG)
        incident = await inject(client, task_queue, first.model_copy(update={"restart_effect": RestartEffect.IN_JOB}),
                                policy, Mode.AUTONOMOUS)
        report = await result(client, incident)
        assert fake.journal() == []
    assert report.state is S.STOPPED and S.FOLLOWING_LAUNCHER not in [e.state for e in report.timeline]
