"""The hot-spare pool on the lab (issue #15): a job that fails on a full cluster runs again on a
spare held in a Slurm reservation at once, where without the pool it waits in the queue; the
node goodput drained refills the pool once it is back in service.

The cluster: node1 runs goodput-alice's opted-in job, node2 and node3 run goodput-mallory's
exclusive blockers, node4 sits in the operator's reservation `goodput-spares` (Flags=FLEX). The job
fails with a GPU fault on node1 in autonomous mode: node1 is drained and the job requeued. Times
from the injected fault to the job running again are printed for both cases; the only timed
assertion is a generous bound.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.identifiers import InvalidIdentifierError
from goodput.models import AnomalyKind, Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import Phase, ReturnToServicePolicy
from goodput.recover.policy import Policy
from goodput.recover.spares import SparePolicy
from goodput.scheduler import JobInfo, JobState, UnknownReservationError
from goodput.slurm.submit_as import OwnerError
from tests.fakes.notifier import RecordingNotifier
from tests.helpers import wait_until
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject, result
from workers.worker import build_worker
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id

from .conftest import Lab
from .harness import RecordingRunner, eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

POOL = "goodput-spares"
ALICE, MALLORY = "goodput-alice", "goodput-mallory"
WAITED_S = 30.0  # without the pool, the job must still be pending this long after the fault
BOUND_S = 60.0  # with the pool, running again well within this (it takes ~10 s: cred_expire)
TRAIN = """#!/bin/bash
while true; do echo "iteration step"; sleep 1; done
"""


@dataclass
class Full:
    """The lab filled up: alice's job on node1, mallory's blockers on node2 and node3."""

    job: JobInfo
    blockers: tuple[str, ...]


def _delete_pool(lab: Lab) -> None:
    def deleted(done: subprocess.CompletedProcess[str]) -> bool:
        text = f"{done.stdout} {done.stderr}".lower()
        return done.returncode == 0 or "reservation is invalid" in text  # 22.05's "there is none"

    # busy while its jobs complete
    wait_until(lambda: lab.run("scontrol", "delete", f"ReservationName={POOL}", check=False), deleted,
               timeout=20, interval=0.5, what=f"reservation {POOL} deleted")


@pytest.fixture
def pool(lab: Lab) -> Iterator[Lab]:
    """The operator's reservation on node4; always removed again, jobs and drains with it."""
    _delete_pool(lab)
    lab.run("scontrol", "create", "reservation", f"ReservationName={POOL}", "Nodes=node4", "StartTime=now",
            "Duration=infinite", "Users=root", "Flags=FLEX")
    try:
        yield lab
    finally:
        ids = lab.run("squeue", "--noheader", "--format=%i", check=False).stdout.split()
        if ids:
            lab.run("scancel", *ids, check=False)
        _delete_pool(lab)  # before the lab's reset, which waits for every node to be idle


async def fill(lab: Lab, backend: SlurmCliBackend) -> Full:
    blockers = tuple(lab.sbatch_as(MALLORY, "--exclusive", f"--nodelist={node}", "--output=/dev/null",
                                   script="#!/bin/sh\nsleep 600\n") for node in ("node2", "node3"))
    for blocker in blockers:
        await eventually(partial(backend.get_job, blocker), lambda j: j.state is JobState.RUNNING,
                         timeout=20, what=f"blocker {blocker} running")
    out = lab.user_dir(ALICE)
    job_id = lab.sbatch_as(ALICE, "--requeue", "--exclusive", "--comment=goodput:opt-in",
                           f"--output={out}/spares-%j.log", script=TRAIN)
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=20,
                           what="alice's job running")
    assert job.nodes == ("node1",), job  # node2/3 taken, node4 reserved
    return Full(job=job, blockers=blockers)


def policy(spares: SparePolicy | None = None, **update: object) -> Policy:
    base = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                  verify_running_timeout_s=90, capacity_wait_s=300)
    return base.model_copy(update={"spares": spares or SparePolicy(), **update})


async def test_without_the_pool_the_restarted_job_waits_in_the_queue(pool: Lab, client: Client,
                                                                     task_queue: str) -> None:
    backend = SlurmCliBackend()
    full = await fill(pool, backend)
    plain = policy()
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=plain):
        started = time.monotonic()
        incident = await inject(client, task_queue, anomaly(full.job.job_id, kind=AnomalyKind.GPU_FAULT,
                                                            nodes=("node1",), cluster=f"lab{uuid.uuid4().hex[:6]}"),
                                plain, Mode.AUTONOMOUS)
        requeued = await eventually(lambda: backend.get_job(full.job.job_id), lambda j: j.restart_count == 1,
                                    timeout=30, what="the job requeued")
        await asyncio.sleep(max(0.0, WAITED_S - (time.monotonic() - started)))
        job = await backend.get_job(full.job.job_id)
        waited = time.monotonic() - started
        await client.get_workflow_handle(incident).terminate("test over")
    print(f"\nwithout the pool: job {job.job_id} still {job.state} ({job.state_reason}) {waited:.1f} s after the fault")
    assert requeued.restart_count == 1
    assert job.state is JobState.PENDING, job
    assert job.state_reason.split(",")[0] in {"Resources", "ReqNodeNotAvail", "Priority"}, job.state_reason


async def test_with_the_pool_the_restarted_job_runs_on_a_spare_at_once_and_its_node_refills_the_pool(
        pool: Lab, client: Client, task_queue: str) -> None:
    backend = SlurmCliBackend()
    full = await fill(pool, backend)
    spares = SparePolicy(reservation=POOL, target_size=2)
    back = ReturnToServicePolicy(enabled=True, quarantine_s=1.0, check_command=("/bin/true",),
                                 offence_window_s=1.0)
    hot = policy(spares, return_to_service=back)
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=hot):
        started = time.monotonic()
        incident = await inject(client, task_queue, anomaly(full.job.job_id, kind=AnomalyKind.GPU_FAULT,
                                                            nodes=("node1",), cluster=cluster), hot, Mode.AUTONOMOUS)
        again = await eventually(lambda: backend.get_job(full.job.job_id),
                                 lambda j: j.state is JobState.RUNNING and j.restart_count == 1,
                                 timeout=BOUND_S, interval=0.25, what="the job running again")
        ran_after = time.monotonic() - started
        report = await result(client, incident)
        # node1 passes its check after the quarantine, is resumed and joins the pool (below target)
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(cluster, "node1"))
        health = await asyncio.wait_for(handle.result(), 60)
    print(f"\nwith pool {POOL}: job {again.job_id} RUNNING on {','.join(again.nodes)} {ran_after:.1f} s after the "
          f"fault")
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert again.nodes == ("node4",) and "node1" in again.excluded_nodes
    details = [e.detail for e in report.timeline]
    assert f"restarted on hot spare node4 from pool {POOL}" in details, details
    reservation = pool.run("scontrol", "show", "reservation", "-o", POOL).stdout
    # alice was let in for the recovery only: it is over, she is out again (her job keeps running)
    assert " Users=root " in reservation and ALICE not in reservation, reservation
    assert f"{ALICE}'s access to pool {POOL} ended with the recovery" in details, details
    assert (await backend.get_job(again.job_id)).state is JobState.RUNNING
    refused = _sbatch_into_pool(pool, ALICE)
    assert refused.returncode != 0 and "access denied" in refused.stderr.lower(), refused
    assert health.phase is Phase.RETURNED, health
    assert f"added node1 to reservation {POOL}" in health.why, health.why
    assert "Nodes=node[1,4] " in pool.run("scontrol", "show", "reservation", "-o", POOL).stdout
    assert "DRAIN" not in pool.node("node1")["State"]


def _sbatch_into_pool(lab: Lab, user: str) -> subprocess.CompletedProcess[str]:
    """`user` submits into the pool on their own, as they would to use the spares at will."""
    home = lab.user_dir(user)
    script = home / f"pool-{time.monotonic_ns()}.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    return subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"SLURM_CONF={lab.conf}", "/usr/sbin/runuser", "-u",
                           user, "--", "sbatch", "--parsable", f"--reservation={POOL}", "--output=/dev/null",
                           str(script)], cwd=home, text=True, capture_output=True, timeout=60)


async def test_an_owner_the_operator_listed_stays_listed_after_the_recovery(pool: Lab, client: Client,
                                                                            task_queue: str) -> None:
    """goodput takes back only what it gave: the operator's own grant to alice outlives the recovery."""
    pool.run("scontrol", "update", f"ReservationName={POOL}", f"Users=root,{ALICE}")
    backend = SlurmCliBackend()
    full = await fill(pool, backend)
    hot = policy(SparePolicy(reservation=POOL))
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=hot):
        incident = await inject(client, task_queue, anomaly(full.job.job_id, kind=AnomalyKind.GPU_FAULT,
                                                            nodes=("node1",), cluster=f"lab{uuid.uuid4().hex[:6]}"),
                                hot, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert (await backend.get_job(full.job.job_id)).nodes == ("node4",)
    assert f" Users=root,{ALICE} " in pool.run("scontrol", "show", "reservation", "-o", POOL).stdout
    assert not any("access to pool" in e.detail for e in report.timeline)


async def test_the_cli_backends_reservation_calls_are_idempotent_and_checked(pool: Lab) -> None:
    runner = RecordingRunner()
    backend = SlurmCliBackend(runner)
    assert (await backend.get_reservation(POOL)).flags[0] == "FLEX"
    assert (await backend.allow_reservation_user(POOL, ALICE)).changed
    assert not (await backend.allow_reservation_user(POOL, ALICE)).changed
    assert (await backend.add_reservation_nodes(POOL, ["node3"])).changed
    assert not (await backend.add_reservation_nodes(POOL, ["node3", "node4"])).changed
    reservation = await backend.get_reservation(POOL)
    assert reservation.nodes == ("node3", "node4") and reservation.users == ("root", ALICE)
    assert (await backend.disallow_reservation_user(POOL, ALICE)).changed
    assert not (await backend.disallow_reservation_user(POOL, ALICE)).changed
    assert (await backend.get_reservation(POOL)).users == ("root",)
    with pytest.raises(UnknownReservationError):
        await backend.get_reservation("goodput-no-such-pool")
    before = len(runner.argvs)
    for bad in ("pool;reboot", "-h", "a b"):
        with pytest.raises((InvalidIdentifierError, OwnerError)):
            await backend.allow_reservation_user(bad, ALICE)
        with pytest.raises((InvalidIdentifierError, OwnerError)):
            await backend.allow_reservation_user(POOL, bad)
        with pytest.raises((InvalidIdentifierError, OwnerError)):
            await backend.disallow_reservation_user(POOL, bad)
        with pytest.raises(InvalidIdentifierError):
            await backend.use_reservation("1", bad)
        with pytest.raises(InvalidIdentifierError):
            await backend.add_reservation_nodes(POOL, [bad])
    assert len(runner.argvs) == before  # refused before any command ran
