"""The chroot runner: the version-matrix lab's seam to a Debian root's own Slurm clients.

A fake chroot(1) (a script printing its argv, or failing as chroot does) shows what is run and how
results come back without a root; the real chroot runs only where the test process is root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import RunnerAccounts
from activities.adapters.slurm_runner import ChrootRunner, CommandRunner
from goodput.scheduler import PermanentSchedulerError


def _fake_chroot(tmp_path: Path, body: str) -> str:
    """A stand-in for chroot(1): a script that prints its argv, one per line, or fails like chroot."""
    path = tmp_path / "chroot"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("root", ["", "relative/root", "/", "//", "/a/../", "/r\x00oot"])
def test_a_root_that_is_not_an_absolute_path_other_than_slash_is_refused(root: str) -> None:
    with pytest.raises(PermanentSchedulerError):
        ChrootRunner(root)


async def test_runs_argv_after_chroot_root_and_reports_argv_as_given(tmp_path: Path) -> None:
    runner = ChrootRunner("/var/cache/r", chroot=_fake_chroot(tmp_path, 'printf "%s\\n" "$@"\n'))
    assert isinstance(runner, CommandRunner)
    result = await runner.run(["scontrol", "show", "node", "a;b $(id)"])
    assert result.ok
    assert result.stdout.splitlines() == ["/var/cache/r", "scontrol", "show", "node", "a;b $(id)"]
    assert result.argv == ("scontrol", "show", "node", "a;b $(id)")


async def test_a_command_missing_in_the_root_is_permanent(tmp_path: Path) -> None:
    chroot = _fake_chroot(tmp_path, "echo \"$0: failed to run command '$2': No such file or directory\" >&2\n"
                                    "exit 127\n")
    with pytest.raises(PermanentSchedulerError, match="No such file"):
        await ChrootRunner("/r", chroot=chroot).run(["scontrol", "ping"])


async def test_the_commands_own_exit_status_is_a_result(tmp_path: Path) -> None:
    chroot = _fake_chroot(tmp_path, "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    result = await ChrootRunner("/r", chroot=chroot).run(["scontrol", "show", "job", "9"])
    assert result.returncode == 1 and "Invalid job id" in result.stderr


async def test_malformed_argv_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    runner = ChrootRunner("/r", chroot=_fake_chroot(tmp_path, f"touch {marker}\n"))
    for argv in ([], ["scontrol", "a\x00b"]):
        with pytest.raises(PermanentSchedulerError):
            await runner.run(argv)
    assert not marker.exists()


def test_the_backend_asks_the_roots_account_database_not_the_hosts() -> None:
    # resubmission as a job's owner must look the owner up where sbatch runs: inside the root
    backend = SlurmCliBackend(ChrootRunner("/r"))
    assert isinstance(backend._accounts, RunnerAccounts)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/chroot"), reason="chroot(2) needs root")
async def test_real_chroot_without_the_command_is_permanent(tmp_path: Path) -> None:
    # an empty root has no scontrol: chroot's own failure is a permanent error, not a result
    (tmp_path / "root").mkdir()
    with pytest.raises(PermanentSchedulerError):
        await ChrootRunner(str(tmp_path / "root")).run(["scontrol", "ping"])
