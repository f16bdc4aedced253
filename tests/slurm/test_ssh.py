"""The SSH runner's own guarantees: verified host keys, exact arguments, retryable outages.

The Scheduler rules over SSH are covered by the contract suite (`slurm-ssh`); these are the
ways SSH itself can go wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.adapters.slurm_ssh import SshRunner, slurm_ssh_backend
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobState,
    PermanentSchedulerError,
    ResubmitRequest,
    TransientSchedulerError,
)
from goodput.slurm.submit_as import BecomeMode, OwnerError
from tests.helpers import free_port

from .conftest import Lab, Sshd
from .harness import BATCH_ADDED, IDENTITY_PROBE, eventually, probe_report

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


def runner_for(lab: Lab, sshd: Sshd, *, known_hosts: Path | None = None, port: int | None = None) -> SshRunner:
    return SshRunner("127.0.0.1", port=port or sshd.port, username="root",
                     known_hosts=known_hosts or sshd.known_hosts, client_keys=[sshd.client_key],
                     env={"SLURM_CONF": str(lab.conf)}, timeout_s=20, connect_timeout_s=5)


async def test_wrong_host_key_is_refused_permanently(lab: Lab, sshd: Sshd) -> None:
    runner = runner_for(lab, sshd, known_hosts=sshd.other_known_hosts)
    try:
        with pytest.raises(PermanentSchedulerError, match="host key"):
            await runner.run(["scontrol", "ping"])
    finally:
        await runner.close()


def test_known_hosts_is_mandatory(lab: Lab, sshd: Sshd, tmp_path: Path) -> None:
    with pytest.raises(PermanentSchedulerError, match="known_hosts"):
        runner_for(lab, sshd, known_hosts=tmp_path / "missing")


async def test_arguments_arrive_verbatim(lab: Lab, sshd: Sshd, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    reason = f"goodput:inc-ssh: it's \"quoted\" $(touch {canary}); touch {canary} `id` & | > <"
    backend, runner = slurm_ssh_backend("127.0.0.1", port=sshd.port, username="root",
                                        known_hosts=sshd.known_hosts, client_keys=[sshd.client_key],
                                        env={"SLURM_CONF": str(lab.conf)})
    try:
        assert (await backend.drain_node("node4", reason)).changed
        assert (await backend.get_node("node4")).reason == reason
        assert lab.node("node4")["Reason"] == reason
        assert not canary.exists()
        assert runner.remote_command(["echo", "a b"]).startswith("cd / && env SLURM_CONF=")
    finally:
        await runner.close()


async def test_unreachable_login_node_is_transient(lab: Lab, sshd: Sshd) -> None:
    runner = runner_for(lab, sshd, port=free_port())
    with pytest.raises(TransientSchedulerError):
        await runner.run(["scontrol", "ping"])


async def test_reconnects_after_the_connection_drops(lab: Lab, sshd: Sshd) -> None:
    runner = runner_for(lab, sshd)
    try:
        first = await runner.run(["scontrol", "ping"])
        await runner.close()  # as if the login node dropped us
        second = await runner.run(["scontrol", "ping"])
        assert first.ok and second.ok and "UP" in second.stdout
        stdin = await runner.run(["cat"], stdin=b"#!/bin/bash\necho hi\n")
        assert stdin.stdout == "#!/bin/bash\necho hi\n"
    finally:
        await runner.close()


async def test_resubmission_over_ssh_runs_as_the_owner_with_a_clean_environment(
        lab: Lab, sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    out = lab.user_dir("goodput-alice") / "ssh-probe-%j.out"
    job_id = lab.sbatch_as("goodput-alice", "--comment=goodput:opt-in", f"--output={out}", script=IDENTITY_PROBE)
    backend, runner = slurm_ssh_backend("127.0.0.1", port=sshd.port, username="root", known_hosts=sshd.known_hosts,
                                        client_keys=[sshd.client_key], env={"SLURM_CONF": str(lab.conf)})
    try:
        original = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                                    timeout=20, what="alice's job to run")
        result = await backend.resubmit_job(job_id, ResubmitRequest(
            exclude=original.nodes, environment={"GOODPUT_RESUME_FROM": "/ckpt/7"}, incident_id="inc-ssh"))
        copy = await eventually(lambda: backend.get_job(result.new_job_id or ""),
                                lambda j: j.state is JobState.RUNNING, timeout=20, what="the copy to run")
        assert (copy.user, copy.user_id) == ("goodput-alice", original.user_id)
        path = lab.user_dir("goodput-alice") / f"ssh-probe-{copy.job_id}.out"
        text = await eventually(lambda: _read(path), lambda t: "probe-env: SLURM_JOB_ID" in t, timeout=20,
                                what="the copy's output")
        user, env = probe_report(text)
        assert user.startswith("probe-user=goodput-alice ")
        assert env["GOODPUT_RESUME_FROM"] == "/ckpt/7" and env["SLURM_CONF"] == str(lab.conf)
        # nothing of the worker's, nor of the SSH session on the login node (SSH_CONNECTION, MAIL...)
        allowed = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "SLURM_CONF", "GOODPUT_RESUME_FROM"} | BATCH_ADDED
        assert {k for k in env if k not in allowed and not k.startswith(("SLURM_", "SLURMD_"))} == set()
    finally:
        await runner.close()


async def test_sudo_mode_refuses_when_the_login_node_cannot_sudo(lab: Lab, sshd: Sshd) -> None:
    # this login node has no sudo: goodput must refuse, never submit alice's copy as its own login user
    job_id = lab.sbatch_as("goodput-alice", "--comment=goodput:opt-in", "--output=/dev/null",
                           script="#!/bin/sh\nsleep 300\n")
    backend, runner = slurm_ssh_backend("127.0.0.1", port=sshd.port, username="root", known_hosts=sshd.known_hosts,
                                        client_keys=[sshd.client_key], env={"SLURM_CONF": str(lab.conf)},
                                        resubmit_as=BecomeMode.SUDO)
    try:
        with pytest.raises(OwnerError, match=r"cannot submit job \d+.s copy as goodput-alice"):
            await backend.resubmit_job(job_id, ResubmitRequest())
        active = [j.job_id for j in await backend.list_jobs() if j.state in ACTIVE_JOB_STATES]
        assert active == [job_id]
    finally:
        await runner.close()


async def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
