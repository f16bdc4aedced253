"""On the lab: the breaker's switch limit over Slurm's own topology (issue #28's lab test).

The lab runs TopologyPlugin=topology/tree with every node under one leaf switch (`lableaf`,
scripts/slurm-lab/up.sh). With a switch limit and no configured switch map, goodput reads the map
from `scontrol show topology`: three drains under that switch trip its limit, and the third
incident waits for an operator's approval, saying the switch is the likelier culprit.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import LocalRunner
from goodput.models import Mode
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.trust import AutonomyPolicy
from tests.fakes.notifier import RecordingNotifier
from workers.worker import build_worker

from .conftest import Lab, SlurmRecords
from .switch_limit import assert_switch_held_the_third, drain_two_then_wait, running_job

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(240)]


async def test_the_lab_reports_its_switch(lab: Lab) -> None:
    del lab  # the lab's slurm.conf, for scontrol
    switches = await SlurmCliBackend(LocalRunner()).topology()
    assert [(s.name, s.level) for s in switches] == [("lableaf", 0)], (
        "the lab runs without topology.conf: restart it with scripts/slurm-lab/up.sh of this tree")


async def test_three_drains_under_one_slurm_switch_trip_its_limit(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    backend = SlurmCliBackend(LocalRunner())
    cluster = f"topo{uuid.uuid4().hex[:6]}"
    # No switch map configured: Slurm's is used. Each drain rests on the job's log alone and acts
    # at once (the point is the switch limit, not the second signal or the rule's record).
    policy = Policy(mode=Mode.AUTONOMOUS, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                    verify_poll_interval_s=0.5, verify_running_timeout_s=5, capacity_wait_s=0, in_job_follow_s=0,
                    max_resume_attempts=1, autonomy=AutonomyPolicy(earned=False),
                    exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=False),
                    breaker=BreakerPolicy(max_drained_nodes=10, max_drains_per_switch=2))
    jobs = [await running_job(backend, lab, tmp_path) for _ in range(3)]
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        _, waiting = await drain_two_then_wait(lab, client, task_queue, policy, cluster, jobs)
    assert_switch_held_the_third(lab, records, jobs, waiting, "lableaf")
