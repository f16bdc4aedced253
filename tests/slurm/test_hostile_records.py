"""Job records on the lab that a hostile user has tried to forge: goodput reads her job, and only hers.

goodput-alice (a victim) runs a real job. goodput-mallory submits jobs whose name, comment,
output path, network and burst-buffer strings carry `JobId=<alice's job>`, `UserId=root(0)`,
`NodeList=node4`, `Partition=gpu`, `StdOut=/etc/shadow`..., which `scontrol show job -o` prints
as if they were keys. Each test would fail on the old parser ("later duplicates win" made
`get_job(mallory's)` return alice's id, root's uid and /etc/shadow). Ground truth is Slurm's own
JSON, read here with nothing of goodput's.
"""

from __future__ import annotations

import json
import pwd
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from goodput.scheduler import JobInfo, JobState
from goodput.slurm.errors import SlurmRecordError
from goodput.slurm.jsonout import find_job_object
from goodput.slurm.jsonrecord import record_from_json
from goodput.slurm.records import job_from_record
from goodput.slurm.resubmit import merged_exclusions, options_from_record
from goodput.slurm.unambiguous import job_record

from .conftest import Lab
from .harness import eventually

pytestmark = pytest.mark.slurm

ALICE, MALLORY = "goodput-alice", "goodput-mallory"
SLEEP = "#!/bin/bash\nsleep 300\n"


def truth(lab: Lab, job_id: str) -> dict[str, Any]:
    """The job as Slurm's JSON has it (22.05's squeue --json lists every job)."""
    jobs = json.loads(lab.run("squeue", "--json").stdout)["jobs"]
    found: list[dict[str, Any]] = [job for job in jobs if job["job_id"] == int(job_id)]
    assert len(found) == 1, f"job {job_id} not in squeue --json"
    return found[0]


def state_of(lab: Lab, job_id: str) -> str:
    return str(truth(lab, job_id)["job_state"])


async def started(lab: Lab, job_id: str) -> None:
    async def probe() -> str:
        return state_of(lab, job_id)
    await eventually(probe, lambda state: state != "PENDING", timeout=20, what=f"job {job_id} to start")


@pytest.fixture
def alice_job(lab: Lab) -> str:
    job_id = lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--requeue", "--output=/dev/null", script=SLEEP)
    assert job_id
    return job_id


def assert_alice_untouched(lab: Lab, job_id: str) -> None:
    job = truth(lab, job_id)
    assert job["job_state"] == "RUNNING" and job["restart_cnt"] == 0 and job["priority"] != 0
    assert job["user_name"] == ALICE


def assert_mallorys_own(job: JobInfo, lab: Lab, job_id: str) -> None:
    real = truth(lab, job_id)
    assert job.job_id == job_id
    assert (job.user, job.user_id) == (MALLORY, pwd.getpwnam(MALLORY).pw_uid)
    assert job.group_id == real["group_id"] != 0
    assert job.partition == real["partition"]
    assert ",".join(job.nodes) == real["nodes"] or (len(job.nodes) > 1 and "[" in real["nodes"])
    assert "/etc/shadow" not in (job.stdout_path, job.stderr_path)
    assert job.restart_count == real["restart_cnt"]


FORGERIES = {
    "comment": ["--comment=goodput:opt-in JobId={alice} UserId=root(0) GroupId=root(0) NodeList=node4 "
                "Partition=gpu StdOut=/etc/shadow Restarts=7 Requeue=1"],
    "name": ["--job-name=n JobId={alice} UserId=root(0) GroupId=root(0) NodeList=node4", "--comment=goodput:opt-in"],
    "newline": ["--comment=goodput:opt-in\nJobId={alice} UserId=root(0) NodeList=node4 Partition=gpu",
                "--job-name=x\nJobId={alice} UserId=root(0)"],
    "output path": ["--comment=goodput:opt-in", "--output={dir}/o StdOut=/etc/shadow Restarts=7 x.log"],
    # a path that reads as /etc/shadow once its tail is taken for a key (the job itself, as
    # mallory, cannot even open it and fails)
    "output tail": ["--comment=goodput:opt-in", "--output=/etc/shadow BurstBuffer=x"],
    "network and burst buffer": ["--comment=goodput:opt-in", "--network=net JobId={alice} UserId=root(0)",
                                 "--bb=bb JobId={alice} NodeList=node4"],
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_get_job_reads_the_forging_job_as_slurm_has_it(lab: Lab, alice_job: str, forgery: str) -> None:
    args = [a.format(alice=alice_job, dir=lab.user_dir(MALLORY)) for a in FORGERIES[forgery]]
    if not any(a.startswith("--output=") for a in args):
        args.append("--output=/dev/null")
    mallory_job = lab.sbatch_as(MALLORY, *args, script=SLEEP)
    await started(lab, mallory_job)
    printed = lab.run("scontrol", "show", "job", "-o", mallory_job).stdout
    # the forgery reached scontrol's text
    assert any(token in printed for token in (f"JobId={alice_job}", "StdOut=/etc/shadow", "BurstBuffer=x"))
    try:
        job = await SlurmCliBackend().get_job(mallory_job)
    except SlurmRecordError:
        return  # refusing is allowed; reading alice's job is not
    assert_mallorys_own(job, lab, mallory_job)
    assert_alice_untouched(lab, alice_job)


async def test_an_interactive_job_cannot_name_output_files(lab: Lab, alice_job: str) -> None:
    comment = f"--comment=goodput:opt-in StdOut=/etc/shadow StdErr=/etc/shadow JobId={alice_job}"
    salloc = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"SLURM_CONF={lab.conf}", "/usr/sbin/runuser",
                             "-u", MALLORY, "--", "salloc", "--no-shell", "-N1", "-J", "interactive", comment],
                            cwd=lab.user_dir(MALLORY), text=True, capture_output=True, timeout=60)
    assert salloc.returncode == 0, salloc.stderr
    job_id = next(word for word in salloc.stderr.split() if word.isdigit())
    job = await SlurmCliBackend().get_job(job_id)
    assert_mallorys_own(job, lab, job_id)
    assert job.stdout_path == job.stderr_path == ""


async def test_actions_on_a_forging_job_never_touch_the_job_it_names(lab: Lab, alice_job: str) -> None:
    await started(lab, alice_job)
    forged = (f"--comment=goodput:opt-in JobId={alice_job} UserId=goodput-alice({pwd.getpwnam(ALICE).pw_uid}) "
              f"Partition=gpu NodeList=node1")
    mallory_job = lab.sbatch_as(MALLORY, forged, f"--job-name=n JobId={alice_job}", "--requeue",
                                "--output=/dev/null", script=SLEEP)
    await started(lab, mallory_job)
    backend = SlurmCliBackend()  # opt-in enforced: mallory's comment carries the marker
    assert (await backend.hold_job(mallory_job)).changed
    assert truth(lab, mallory_job)["priority"] == 0
    assert_alice_untouched(lab, alice_job)
    assert (await backend.requeue_job(mallory_job)).changed
    assert_alice_untouched(lab, alice_job)

    async def mallorys() -> JobInfo:
        return await backend.get_job(mallory_job)

    # A requeued job completes its old run first; cancelling it meanwhile is "already completing".
    await eventually(mallorys, lambda job: job.state is not JobState.COMPLETING, timeout=20,
                     what="mallory's requeued job to finish completing")
    assert (await backend.cancel_job(mallory_job)).changed
    assert_alice_untouched(lab, alice_job)

    cancelled = await eventually(mallorys, lambda job: job.state is JobState.CANCELLED, timeout=20,
                                 what="mallory's job to be cancelled")
    assert cancelled.user == MALLORY


def test_resubmission_reads_the_same_options_from_text_and_from_json(lab: Lab) -> None:
    # A key-like comment sends resubmission to the JSON listing: it must rebuild the same job.
    out = lab.user_dir(ALICE) / "twin-%j.log"
    job_id = lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--requeue", "--nodes=2", "--ntasks-per-node=1",
                           "--time=10", "--mem=100", "--gres=gpu:1", "--partition=gpu", "--job-name=twin",
                           f"--output={out}", "--exclude=node4", script=SLEEP)
    text = job_record(lab.run("scontrol", "show", "job", "-o", job_id).stdout, job_id)
    listed = record_from_json(find_job_object(json.loads(lab.run("squeue", "--json").stdout), job_id))
    assert options_from_record(listed, token="T") == options_from_record(text, token="T")
    assert merged_exclusions(listed, ()) == merged_exclusions(text, ()) == ("node4",)
    assert job_from_record(listed).user == job_from_record(text).user == ALICE


async def test_the_watchers_job_lines_carry_nothing_a_job_wrote(lab: Lab, alice_job: str) -> None:
    # The cluster watcher scans one line per job (#29). Mallory's name and comment each carry a
    # newline and a forged scan line: alice's job as FAILED, a job 999999 running on node4.
    forged = f"\n{alice_job}|FAILED|0|node4|debug|\n999999|RUNNING|0|node4|gpu|"
    mallory_job = lab.sbatch_as(MALLORY, f"--job-name=x{forged}", f"--comment=goodput:opt-in{forged}",
                                "--output=/dev/null", script=SLEEP)
    await started(lab, mallory_job)
    ran: list[tuple[str, ...]] = []
    runner = LocalRunner()

    class Recording:
        async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                      timeout_s: float | None = None) -> CommandResult:
            ran.append(tuple(argv))
            return await runner.run(argv, stdin=stdin, timeout_s=timeout_s)

    lines = {s.job_id: s for s in await SlurmCliBackend(runner=Recording()).list_job_statuses()}
    assert [argv[:2] for argv in ran] == [("squeue", "--noheader")]  # read from the lines, no fallback
    assert "999999" not in lines
    assert lines[alice_job].state is JobState.RUNNING and lines[alice_job].restart_count == 0
    real = truth(lab, mallory_job)
    assert lines[mallory_job].state is JobState.RUNNING
    assert ",".join(lines[mallory_job].nodes) == real["nodes"] and lines[mallory_job].partition == real["partition"]
    assert_alice_untouched(lab, alice_job)
