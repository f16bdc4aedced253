"""CLI-backend behaviour only a live Slurm can show: its version, a dead controller, allowlists."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import LocalRunner
from goodput.scheduler import JobState, TransientSchedulerError

from .conftest import Lab
from .harness import eventually

pytestmark = pytest.mark.slurm


async def test_version_is_detected_not_assumed(lab: Lab) -> None:
    installed = subprocess.run(["slurmd", "-V"], capture_output=True, text=True).stdout
    major, minor = (int(x) for x in re.findall(r"(\d+)\.(\d+)", installed)[0])
    version = await SlurmCliBackend().slurm_version()
    assert version[:2] == (major, minor)
    recorded = (lab.dir / "lab.env").read_text()
    assert f"SLURMLAB_SLURM_VERSION={major}.{minor:02d}" in recorded


async def test_unreachable_controller_is_transient(lab: Lab, tmp_path: Path) -> None:
    # a copy of the lab's config that points at a port nothing listens on
    conf = lab.conf.read_text()
    conf = re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", conf)
    conf = re.sub(r"(?m)^MessageTimeout=.*$", "MessageTimeout=2", conf)
    dead = tmp_path / "slurm.conf"
    dead.write_text(conf)
    backend = SlurmCliBackend(LocalRunner(env={"SLURM_CONF": str(dead)}, timeout_s=20))
    started = time.monotonic()
    with pytest.raises(TransientSchedulerError, match="Unable to contact slurm controller"):
        await backend.get_job("1")
    with pytest.raises(TransientSchedulerError):
        await backend.list_jobs()  # squeue --json exits 0 here; the errors list must not read as "no jobs"
    assert time.monotonic() - started < 20


async def test_partition_allowlist_opts_jobs_in(lab: Lab) -> None:
    job_id = lab.sbatch("--partition=gpu", "--output=/dev/null", "--wrap", "sleep 300")
    backend = SlurmCliBackend(allow_partitions=["gpu"])
    await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=20,
                     what="job to run")
    assert (await backend.hold_job(job_id)).changed  # running: only its priority drops to 0
    assert (await backend.cancel_job(job_id)).changed
