"""In-cluster (slurmrestd) mode with SSH for what REST cannot do, wired from settings, on the lab.

slurmrestd has no requeue, and a job submitted through it would belong to goodput's JWT user,
not to the job's owner; a controller pod has no Slurm commands of its own. With `slurm.ssh_host`
set, those operations go to a login node over SSH: requeue there, and resubmission as the owner.
Built by `scheduler_from` (what the worker runs), with the local commands made to fail, so the
test proves the path goes through sshd and never through this host's scontrol.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.adapters.slurm_rest import SlurmRestBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from goodput.config import Settings
from goodput.scheduler import JobState, ResubmitRequest
from workers.worker import scheduler_from

from .conftest import Lab, Restd, Sshd
from .harness import IDENTITY_PROBE, eventually

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


@pytest.mark.timeout(180)
async def test_rest_mode_requeues_and_resubmits_as_the_owner_over_ssh(
        lab: Lab, slurmrestd: Restd, sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_local_commands(self: LocalRunner, argv: object, **_: object) -> CommandResult:
        raise AssertionError(f"ran {argv} on the worker's host instead of the login node")

    monkeypatch.setattr(LocalRunner, "run", no_local_commands)
    token = tmp_path / "jwt"
    token.write_text(slurmrestd.token)
    settings = Settings(scheduler="slurm-rest", resubmit_key="rest-ssh-fallback-key-0123456789",
                        slurm={"rest_url": slurmrestd.url, "rest_user": slurmrestd.user, "rest_token_file": token,
                               "rest_allow_http": True,  # loopback
                               "ssh_host": "127.0.0.1", "ssh_port": sshd.port, "ssh_user": "root",
                               "ssh_known_hosts": sshd.known_hosts, "ssh_client_keys": [sshd.client_key],
                               "ssh_slurm_conf": str(lab.conf)})
    backend = scheduler_from(settings)
    assert isinstance(backend, SlurmRestBackend)
    try:
        await _requeue_then_resubmit(lab, backend)
    finally:
        await backend.aclose()  # and the fallback's SSH connection


async def _requeue_then_resubmit(lab: Lab, backend: SlurmRestBackend) -> None:
    job_id = lab.sbatch_as("goodput-alice", "--comment=goodput:opt-in", "--requeue", "--output=/dev/null",
                           script=IDENTITY_PROBE)
    running = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                               timeout=30, what="alice's job to run")

    requeued = await backend.requeue_job(job_id)
    assert requeued.changed, requeued.detail
    again = await eventually(lambda: backend.get_job(job_id), lambda j: j.restart_count >= 1, timeout=30,
                             what="Slurm to record the requeue")
    assert again.user == "goodput-alice"

    result = await backend.resubmit_job(job_id, ResubmitRequest(exclude=running.nodes, incident_id="inc-rest-ssh"))
    copy = await eventually(lambda: backend.get_job(result.new_job_id or ""),
                            lambda j: j.state is JobState.RUNNING, timeout=40, what="the copy to run")
    assert (copy.user, copy.user_id) == ("goodput-alice", running.user_id)  # the owner's, not the JWT user's
    assert not set(copy.nodes) & set(running.nodes)
