"""Checkpoint-aware resume: the newest valid checkpoint is chosen, exported, and verified past.

The checkpoint tree and the output file belong to the job's owner, as real ones do: when the
tests run as root, the worker reads the tree as that owner in a child process, so it lives where
the owner can traverse (pytest's own tmp_path is root-only) and is chowned to them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from goodput.checkpoints import CheckpointConfig, to_comment
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from tests.fakes.checkpoint_bytes import dcp_metadata
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal
S = IncidentState


def dcp_checkpoints(root: Path) -> None:
    """step-100 is whole; step-200, the newest, has a truncated shard (a save that died): 16 of
    the 64 bytes its `.metadata` records."""
    for step, shard_bytes in ((100, b"x" * 64), (200, b"x" * 16)):
        directory = root / f"step-{step}"
        directory.mkdir(parents=True)
        (directory / ".metadata").write_bytes(dcp_metadata({"__0_0.distcp": 64, "__1_0.distcp": 64}))
        (directory / "__0_0.distcp").write_bytes(b"y" * 64)
        (directory / "__1_0.distcp").write_bytes(shard_bytes)


@pytest.fixture
def ckpt_root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="goodput-ckpt-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base / "ckpt"
    finally:
        shutil.rmtree(base)


def job_with_checkpoints(fake: FakeScheduler, tmp_path: Path, root: Path) -> Path:
    job = fake.snapshot().jobs["1001"]
    dcp_checkpoints(root)
    if os.geteuid() == 0 and job.user_id is not None:
        for path in (root, *root.rglob("*")):
            os.chown(path, job.user_id, job.group_id or job.user_id)
    log = tmp_path / "out.log"
    log.write_text("iteration 240/ 1000 | elapsed time per iteration (ms): 100.0\n")  # the failed attempt
    if os.geteuid() == 0 and job.user_id is not None:
        os.chown(log, job.user_id, job.group_id or job.user_id)  # Slurm writes output as the job's user
    comment = f"goodput:opt-in {to_comment(CheckpointConfig(layout='dcp', root=str(root), settle_s=0))}"
    fake.add_job(job.model_copy(update={"comment": comment, "stdout_path": str(log)}))
    return log


def read_as(job_uid: int | None) -> str:
    """How the worker says it read the tree of a job owned by `job_uid`."""
    if os.geteuid() == 0 and job_uid is not None:
        return f"checkpoint tree read as uid {job_uid}"
    return "checkpoint tree read in-process"


async def lost_work_summary(address: str, task_queue: str, cluster: str) -> dict[str, Any]:
    env = {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": address, "GOODPUT_TASK_QUEUE": task_queue}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", "from workers.main import main; main()",
                                                    "lost-work", "--json", "--cluster", cluster], env=env,
                                   capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


async def test_requeue_resumes_from_the_last_valid_checkpoint_and_verifies_progress_past_it(
        client: Client, task_queue: str, tmp_path: Path, temporal_address: str, ckpt_root: Path) -> None:
    fake = FakeScheduler()
    log = job_with_checkpoints(fake, tmp_path, ckpt_root)
    policy = FAST.model_copy(update={"verify_progress_timeout_s": 30.0})
    failed_at = anomaly().model_copy(update={"progress_step": 240, "step_time_s": 0.5})
    async with running_worker(client, task_queue, fake):
        incident = await inject(client, task_queue, failed_at, policy, Mode.AUTONOMOUS)
        await wait_for_state(client, incident, S.VERIFYING)
        # The job is RUNNING again, but its output shows no step past 100 yet: not recovered.
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
        assert await handle.query(RecoveryWorkflow.state) is S.VERIFYING
        with log.open("a") as out:  # the new attempt restarts from step 100 and moves on
            out.write("iteration 101/ 1000 | elapsed time per iteration (ms): 100.0\n")
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert report.checkpoint is not None and report.checkpoint.step == 100
    assert any("step-200" in e.detail and "__1_0.distcp is truncated" in e.detail for e in report.timeline)
    assert any(read_as(fake.snapshot().jobs["1001"].user_id) in e.detail for e in report.timeline)
    assert any("past checkpoint step 100" in e.detail for e in report.timeline)
    # 140 steps redone (240 reached, resumed from 100) at 0.5 s on 2 nodes x 8 GPUs.
    assert report.lost_work is not None and report.lost_work.iterations == 140
    assert report.lost_work.gpu_hours == pytest.approx(140 * 0.5 * 16 / 3600)
    summed = await lost_work_summary(temporal_address, task_queue, failed_at.cluster)
    assert summed["by_job"][failed_at.cluster]["1001"]["iterations"] == 140


async def test_running_without_progress_past_the_checkpoint_is_not_recovered(
        client: Client, task_queue: str, tmp_path: Path, ckpt_root: Path) -> None:
    fake = FakeScheduler()
    job_with_checkpoints(fake, tmp_path, ckpt_root)
    policy = FAST.model_copy(update={"verify_progress_timeout_s": 1.0, "max_resume_attempts": 1})
    async with running_worker(client, task_queue, fake):
        incident = await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.ESCALATED
    assert any("no progress past step 100" in e.detail for e in report.timeline)


async def test_resubmit_exports_the_checkpoint(client: Client, task_queue: str, tmp_path: Path,
                                               ckpt_root: Path) -> None:
    fake = FakeScheduler()
    job_with_checkpoints(fake, tmp_path, ckpt_root)
    policy = FAST.model_copy(update={"resume": ResumeStrategy.RESUBMIT, "verify_progress_timeout_s": 1.0,
                                     "max_resume_attempts": 1})
    async with running_worker(client, task_queue, fake):
        incident = await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS)
        await result(client, incident)
    [resubmit] = fake.journal("resubmit")
    assert f"GOODPUT_RESUME_FROM={ckpt_root / 'step-100'}" in resubmit.detail
    assert "GOODPUT_RESUME_STEP=100" in resubmit.detail
