"""The SSH runner's own guarantees: verified host keys, exact arguments, retryable outages.

The Scheduler rules over SSH are covered by the contract suite (`slurm-ssh`); these are the
ways SSH itself can go wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.adapters.slurm_ssh import SshRunner, slurm_ssh_backend
from goodput.scheduler import PermanentSchedulerError, TransientSchedulerError

from .conftest import Lab, Sshd, free_port

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
        assert runner.remote_command(["echo", "a b"]).startswith("env SLURM_CONF=")
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
