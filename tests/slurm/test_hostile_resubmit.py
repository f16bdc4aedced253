"""Resubmission on the lab, against real unprivileged users: the copy is its owner's, never goodput's.

goodput runs here as root (the lab's Slurm operator) with secrets in its environment. alice
(goodput-alice) is a victim whose job goodput resubmits; mallory (goodput-mallory) tries to turn
that resubmission into a no-op by claiming, in her own job's comment, to be alice's copy. Each
test would fail on the old resubmission (sbatch as root with `--export=ALL`, copies recognised by
the comment alone).
"""

from __future__ import annotations

import asyncio
import pwd
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import LocalAccounts
from activities.recovery import RecoveryActivities
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput, ResumeResult
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, JobState, ResubmitRequest
from goodput.slurm.records import split_record
from goodput.slurm.resubmit import resubmit_tag
from goodput.slurm.submit_as import Account, OwnerError
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab
from .harness import BATCH_ADDED, IDENTITY_PROBE, KEY, eventually, probe_report

pytestmark = pytest.mark.slurm

ALICE, MALLORY = "goodput-alice", "goodput-mallory"
INCIDENT = "inc-hostile"
# What goodput's worker holds and no job may see.
WORKER_SECRETS = {"GOODPUT_PUSH_TOKEN": "s3cret-push", "GOODPUT_NOTIFY_WEBHOOK_URL": "https://hooks.invalid/s3cret",
                  "GOODPUT_SLURM_TOKEN": "s3cret-jwt", "AWS_SECRET_ACCESS_KEY": "s3cret-aws"}
# What the copy may see beside what slurmd and bash add (docs/slurm.md, "How resubmission runs").
COPY_ENV = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "SLURM_CONF", "GOODPUT_RESUME_FROM", "GOODPUT_RESUME_STEP"}


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in WORKER_SECRETS.items():
        monkeypatch.setenv(key, value)


def alice_job(lab: Lab, *extra: str) -> str:
    out = lab.user_dir(ALICE) / "probe-%j.out"
    return lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--requeue", f"--output={out}", *extra,
                         script=IDENTITY_PROBE)


def lab_uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


async def running(backend: SlurmCliBackend, job_id: str) -> JobInfo:
    return await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                            timeout=20, what=f"job {job_id} to run")


async def read_probe(path: Path) -> str:
    def read() -> str:
        return path.read_text() if path.exists() else ""

    async def probe() -> str:
        return await asyncio.to_thread(read)

    return await eventually(probe, lambda text: "probe-env: " in text and "probe-env: SLURM_JOB_ID" in text,
                            timeout=20, what=f"output of {path.name}")


async def test_the_copy_runs_as_its_owner_with_nothing_of_the_workers_environment(lab: Lab, worker_env: None) -> None:
    backend = SlurmCliBackend()
    original = await running(backend, alice_job(lab))
    assert (original.user, original.user_id) == (ALICE, lab_uid(ALICE))
    bad = original.nodes[0]
    await backend.cancel_job(original.job_id)
    result = await backend.resubmit_job(original.job_id, ResubmitRequest(
        exclude=(bad,), environment={"GOODPUT_RESUME_FROM": "/ckpt/step-40", "GOODPUT_RESUME_STEP": "40"},
        incident_id=INCIDENT))
    assert result.changed and result.new_job_id
    copy = await running(backend, result.new_job_id)
    assert bad not in copy.nodes
    record = split_record(lab.run("scontrol", "show", "job", "-o", copy.job_id).stdout)
    assert record["UserId"] == f"{ALICE}({lab_uid(ALICE)})"

    user, env = probe_report(await read_probe(lab.user_dir(ALICE) / f"probe-{copy.job_id}.out"))
    assert user == f"probe-user={ALICE} probe-uid={lab_uid(ALICE)}"
    assert env["GOODPUT_RESUME_FROM"] == "/ckpt/step-40" and env["GOODPUT_RESUME_STEP"] == "40"
    assert (env["USER"], env["HOME"]) == (ALICE, f"/var/tmp/{ALICE}")
    leaked = {k for k in env if k not in COPY_ENV | BATCH_ADDED and not k.startswith(("SLURM_", "SLURMD_"))}
    assert not leaked, f"the copy saw the worker's {sorted(leaked)}"
    assert not [k for k, v in env.items() if "s3cret" in v or k in WORKER_SECRETS]
    assert env["SLURM_SUBMIT_DIR"] == "/"  # never the worker's directory


@pytest.mark.parametrize("claim", ["untagged", "forged", "stolen"])
async def test_mallorys_job_claiming_to_be_alices_copy_is_ignored(lab: Lab, claim: str) -> None:
    backend = SlurmCliBackend(resubmit_key=KEY)
    original = await running(backend, alice_job(lab))
    tag = {"untagged": f"goodput:resubmit-of={original.job_id}",
           "forged": resubmit_tag(original.job_id, "0" * 32),
           # the real token (as if seen on an earlier copy's public comment), on mallory's job
           "stolen": resubmit_tag(original.job_id, KEY.token(original.job_id, INCIDENT))}[claim]
    mallory = lab.sbatch_as(MALLORY, f"--comment=goodput:opt-in {tag}", "--hold", "--output=/dev/null",
                            script="#!/bin/sh\nsleep 300\n")
    activities = RecoveryActivities(backend, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id=INCIDENT, job_id=original.job_id, strategy=ResumeStrategy.RESUBMIT, exclude=(original.nodes[0],),
        environment={"GOODPUT_RESUME_FROM": "/ckpt/step-1"}))
    assert isinstance(resumed, ResumeResult) and resumed.changed
    assert resumed.job_id not in (original.job_id, mallory)
    copy = await running(backend, resumed.job_id)  # held while the original ran, then released
    assert (copy.user, copy.user_id) == (ALICE, original.user_id)
    await eventually(lambda: backend.get_job(original.job_id), lambda j: j.state not in ACTIVE_JOB_STATES,
                     timeout=20, what="the original to be cancelled")
    left = await backend.get_job(mallory)
    assert left.state is JobState.PENDING and left.held and tag in left.comment  # untouched


async def test_an_owner_without_an_account_on_the_worker_host_is_refused(lab: Lab) -> None:
    class WithoutAlice(LocalAccounts):
        async def account(self, name: str) -> Account | None:
            return None if name == ALICE else await super().account(name)

    class AliceElsewhere(LocalAccounts):
        async def account(self, name: str) -> Account | None:
            found = await super().account(name)
            return found.model_copy(update={"uid": found.uid + 1}) if found else None

    original = await running(SlurmCliBackend(), alice_job(lab))
    for accounts, match in ((WithoutAlice(), "no account"), (AliceElsewhere(), "uid")):
        backend = SlurmCliBackend(accounts=accounts)
        with pytest.raises(OwnerError, match=match):
            await backend.resubmit_job(original.job_id, ResubmitRequest(incident_id=INCIDENT))
        # through the activity: refused before the original is cancelled, so nothing is lost
        activities = RecoveryActivities(backend, RecordingNotifier(), LocalDrainGate())
        with pytest.raises(ApplicationError) as refused:
            await ActivityEnvironment().run(activities.resume, ResumeInput(
                incident_id=INCIDENT, job_id=original.job_id, strategy=ResumeStrategy.RESUBMIT))
        assert refused.value.non_retryable and refused.value.type == "OwnerError"
    jobs = await SlurmCliBackend().list_jobs()
    assert [j.job_id for j in jobs if j.state in ACTIVE_JOB_STATES] == [original.job_id]
    assert (await SlurmCliBackend().get_job(original.job_id)).state is JobState.RUNNING
