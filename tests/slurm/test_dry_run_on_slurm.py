"""Every `--dry-run` changes nothing on a real Slurm: an incident awaiting approval on a live job,
then approve, cancel, kill-switch, breaker reset, nodes return and inject, each with --dry-run;
Slurm's own records (the node's state, the job's state and restart count) and the incident stay
as they were. The same approve without --dry-run then drains the node: the check can fail."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import JobState
from tests.cli.test_cli import arun, cli_env  # noqa: F401 -- the fixture, shared
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import FAST, anomaly, inject, wait_for_state
from workers.worker import build_worker

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

APPROVE = FAST.model_copy(update={"mode": Mode.APPROVE})


async def test_dry_runs_leave_slurm_and_the_incident_as_they_were(
        lab: Lab, client: Client, task_queue: str, cli_env: dict[str, str]) -> None:  # noqa: F811
    backend = SlurmCliBackend()
    job_id = lab.sbatch("--requeue", "--nodes=1", "--comment=goodput:opt-in", "--output=/dev/null",
                        "--wrap", "sleep 300")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: bool(j.nodes) and j.state is JobState.RUNNING,
                           timeout=30, what="job to run")
    node = job.nodes[0]
    a = anomaly(job_id, nodes=(node,))
    env = {**cli_env, "GOODPUT_CLUSTER": a.cluster}
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=APPROVE):
        incident = await inject(client, task_queue, a, APPROVE, Mode.APPROVE)
        await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)
        for argv in (("approve", incident), ("cancel", incident), ("kill-switch", "on"), ("breaker", "reset"),
                     ("nodes", "return", node)):
            done = await arun(*argv, "--reason", "drill", "--who", "erin", "--dry-run", env=env)
            assert done.returncode == 0 and done.stdout.startswith("would "), (argv, done.stdout, done.stderr)
        submitted = await arun("inject", "--job", job_id, "--node", node, "--dry-run", env=env)
        assert submitted.returncode == 0 and submitted.stdout.startswith("would submit anomaly"), submitted.stderr

        after = await backend.get_job(job_id)
        assert (after.state, after.restart_count) == (JobState.RUNNING, 0)
        assert not (await backend.get_node(node)).drained
        assert (await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)).decision is None

        approved = await arun("approve", incident, "--reason", "drill over", "--who", "erin", env=env)
        assert approved.returncode == 0, approved.stderr
        await eventually(lambda: backend.get_node(node), lambda n: n.drained, timeout=30,
                         what="the approved drain in Slurm")
