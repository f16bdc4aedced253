"""The latency benchmark's shims onto a lab's Slurm root (benchmarks/_slurm_root.py): what a goodput
process or the harness passes to `scontrol` reaches the root's `scontrol` byte for byte, and a shim
whose root is gone runs nothing at all."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks._slurm_lab import LabSite
from benchmarks._slurm_root import SLURM_COMMANDS, RootMissing, lab_site, write_shims

pytestmark = pytest.mark.timeout(30)

# Arguments a shell would split, expand or substitute if the shim ever evaluated them.
HOSTILE = ["update", "JobId=7", "Comment=two words", "it's \"quoted\"", "$HOME", "$(touch pwned)", "`id`",
           "a;b", "*", "", "trailing\\", "new\nline", "-o", "%N"]


def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name in SLURM_COMMANDS:
        binary = root / "usr" / "bin" / name
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(0o755)
    return root


def fake_chroot(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for /usr/sbin/chroot that records its argv NUL-separated (no privileges needed)."""
    record = tmp_path / "argv"
    chroot = tmp_path / "chroot"
    chroot.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{record}'\n")
    chroot.chmod(0o755)
    return chroot, record


def test_each_shim_hands_its_argv_to_the_roots_command_untouched(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    chroot, record = fake_chroot(tmp_path)
    shims = write_shims(tmp_path / "shims", root, chroot=chroot)
    for name in SLURM_COMMANDS:
        done = subprocess.run([str(shims / name), *HOSTILE], cwd=tmp_path, capture_output=True, timeout=10)
        assert done.returncode == 0, done.stderr
        assert record.read_bytes().split(b"\0")[:-1] == [str(root).encode(), f"/usr/bin/{name}".encode(),
                                                         *(a.encode() for a in HOSTILE)]
    assert not (tmp_path / "pwned").exists()


def test_a_shim_whose_root_is_gone_refuses_and_runs_nothing(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    chroot, record = fake_chroot(tmp_path)
    shims = write_shims(tmp_path / "shims", root, chroot=chroot)
    (root / "usr" / "bin" / "scontrol").unlink()
    done = subprocess.run([str(shims / "scontrol"), "ping"], capture_output=True, text=True, timeout=10)
    assert done.returncode == 127
    assert "no Slurm root" in done.stderr
    assert not record.exists()


@pytest.mark.parametrize("root", ["", "relative/root", "/nonexistent/goodput-root"])
def test_no_shims_are_written_without_a_root(tmp_path: Path, root: str) -> None:
    with pytest.raises(RootMissing):
        write_shims(tmp_path / "shims", Path(root))
    assert not (tmp_path / "shims").exists()


def test_a_root_with_a_quote_in_its_path_is_still_one_argument(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "it's $HOME")
    chroot, record = fake_chroot(tmp_path)
    shims = write_shims(tmp_path / "shims", root, chroot=chroot)
    subprocess.run([str(shims / "sinfo")], capture_output=True, timeout=10, check=True)
    assert record.read_bytes().split(b"\0")[:-1] == [str(root).encode(), b"/usr/bin/sinfo"]


def test_each_version_gets_its_own_directory_and_ports_as_the_contract_suites_labs_do() -> None:
    site = LabSite(Path("/tmp/lab-b"), ctl_port=22717, slurmd_baseport=22800, rest_port=22780)
    assert lab_site(site, "22.05") == site
    assert lab_site(site, "24.11") == LabSite(Path("/tmp/lab-b-24.11"), 23717, 23800, 23780)
    assert lab_site(site, "26.05") == LabSite(Path("/tmp/lab-b-26.05"), 24717, 24800, 24780)
