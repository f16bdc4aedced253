"""Recovery steps heartbeat while a scheduler call is slow, so a hung slurmctld or slurmrestd
fails the attempt with its own timeout (which `goodput incident` shows as the reason it waits)
instead of Temporal's 5 s heartbeat timeout abandoning the call mid-flight."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from activities.scheduler_calls import heartbeating
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Anomaly, AnomalyKind, AnomalySource, IncidentKey
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import AttributeInput, VerifyInput
from goodput.scheduler import JobInfo
from tests.fakes.notifier import RecordingNotifier

SLOW_S = 2.5  # over two of the steps' 1 s heartbeat intervals


class SlowScheduler(FakeScheduler):
    async def get_job(self, job_id: str) -> JobInfo:
        await asyncio.sleep(SLOW_S)
        return await super().get_job(job_id)


def recorded(env: ActivityEnvironment) -> list[object]:
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return beats


async def test_attribution_heartbeats_while_the_scheduler_is_slow() -> None:
    env = ActivityEnvironment()
    beats = recorded(env)
    now = datetime.now(UTC)
    key = IncidentKey(cluster="c", job_id="1001", job_attempt=0)
    found = Anomaly(id="a-1", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT, cluster="c", job_id="1001",
                    nodes=("node2",), observed_at=now, detected_at=now)
    activities = RecoveryActivities(SlowScheduler(), RecordingNotifier(), LocalDrainGate())
    result = await env.run(activities.attribute, AttributeInput(incident_id="i", key=key, anomalies=(found,)))
    assert result.job is not None and len(beats) >= 2


async def test_verification_heartbeats_while_one_poll_is_slow() -> None:
    env = ActivityEnvironment()
    beats = recorded(env)
    activities = RecoveryActivities(SlowScheduler(), RecordingNotifier(), LocalDrainGate())
    result = await env.run(activities.verify, VerifyInput(job_id="1001", same_job=False, timeout_s=30,
                                                         poll_interval_s=0.1))
    assert result.ok and len(beats) >= 2


async def test_a_step_run_as_a_local_activity_does_not_heartbeat() -> None:
    """Local activities (the straight path's fast lookups, #29) run inside their workflow task
    and cannot heartbeat: each beat would only be refused by the worker (a warning per second)."""
    env = ActivityEnvironment()
    env.info = replace(env.info, is_local=True)
    beats = recorded(env)

    async def slow() -> None:
        async with heartbeating():
            await asyncio.sleep(SLOW_S)

    await env.run(slow)
    assert beats == []


async def test_a_step_done_within_one_interval_sends_no_heartbeat() -> None:
    """Each heartbeat is a Temporal frontend call and a write to its store: a step that finishes
    in well under the 1 s interval (most do) must not pay one (#29: 6 per incident in a storm)."""
    env = ActivityEnvironment()
    beats = recorded(env)

    async def quick() -> None:
        async with heartbeating():
            await asyncio.sleep(0.05)

    await env.run(quick)
    assert beats == []
