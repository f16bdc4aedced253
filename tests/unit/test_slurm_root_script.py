"""scripts/slurm-lab/root.sh keeps a Debian root only when its Slurm is the version asked for.

sid moves daily: a rebuild after Debian uploads a newer Slurm would quietly turn the 26.05 cells
into cells of another release. The script runs here with stand-ins for the system commands it
calls (`id`, `debootstrap`, `chroot`, `mount`): no root, no network, no Debian archive.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-lab" / "root.sh"

STANDINS = {
    "id": "echo 0",
    # debootstrap --variant=minbase SUITE DIR MIRROR: a directory tree that looks like a root
    "debootstrap": 'mkdir -p "$3/var/log" "$3/etc" "$3/proc"',
    # `chroot ROOT slurmd -V` says which Slurm the suite installed; apt-get and the rest succeed
    "chroot": 'if [ "$2" = slurmd ]; then echo "slurm $STANDIN_SLURM"; fi',
    "mount": "exit 0",
    "umount": "exit 0",
    "mountpoint": "exit 1",
}


def run_root_sh(tmp_path: Path, version: str, installs: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STANDINS.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMLAB_ROOTS": str(tmp_path / "roots"),
           "SLURMLAB_DIR": str(tmp_path / "lab"), "STANDIN_SLURM": installs}
    return subprocess.run(["bash", str(SCRIPT), version], env=env, text=True, capture_output=True, timeout=50)


def test_a_root_of_the_asked_version_is_built_and_kept(tmp_path: Path) -> None:
    done = run_root_sh(tmp_path, "26.05", "26.05.5")
    assert done.returncode == 0, done.stderr
    root = Path(done.stdout.splitlines()[-1])
    assert root == tmp_path / "roots" / "slurm-26.05"
    assert "slurm=26.05.5" in (root / ".goodput-slurmlab-root").read_text().splitlines()


def test_a_suite_that_moved_to_another_slurm_is_refused_and_nothing_kept(tmp_path: Path) -> None:
    done = run_root_sh(tmp_path, "26.05", "26.11.0")
    assert done.returncode == 1
    assert "Debian sid now installs Slurm 26.11.0" in done.stderr and "docs/slurm.md" in done.stderr
    assert sorted(p.name for p in (tmp_path / "roots").iterdir()) == [".lock-26.05"]


def test_a_cached_root_of_another_slurm_is_refused(tmp_path: Path) -> None:
    # a root cached before the check, or by hand, whose marker names the suite but not the version
    root = tmp_path / "roots" / "slurm-24.11"
    root.mkdir(parents=True)
    (root / ".goodput-slurmlab-root").write_text("suite=trixie\nslurm=25.05.1\n")
    done = run_root_sh(tmp_path, "24.11", "24.11.5")
    assert done.returncode == 1
    assert "Debian trixie now installs Slurm 25.05.1" in done.stderr
