"""The live Slurm lab for tests marked `slurm`: started once per session, torn down after.

`slurm_lab` runs scripts/slurm-lab/up.sh (or reuses a lab that is already up, e.g. one CI
started), exports SLURM_CONF for this process and the Slurm commands it runs, and runs down.sh
at the end only if it started the lab. `version_labs` does the same for a lab on a newer Slurm
(24.11, 26.05) inside a Debian root, on its own directory and ports (see `version_lab_env`), for
the version-matrix cells of the contract suite. Without the Slurm packages (or root) the tests skip, unless
GOODPUT_REQUIRE_SLURM=1 (CI) makes that a failure: a CI run that silently skips its only
real-Slurm coverage would look green while testing nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from goodput.slurm.records import node_from_record, split_record, split_records
from tests.helpers import wait_until
from tests.required import unavailable
from tests.slurm.lab_sshd import Sshd as Sshd  # re-exported: harness.py and tests import it from here
from tests.slurm.lab_sshd import private_sshd

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "slurm-lab"
LAB_DIR = Path(os.environ.get("SLURMLAB_DIR", "/tmp/goodput-slurmlab"))
REQUIRED = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "sinfo", "scancel")


@dataclass
class Lab:
    """A running lab: its SLURM_CONF and a few synchronous helpers for arranging tests."""

    dir: Path
    conf: Path
    started_here: bool
    version: str = "22.05"
    chroot: str | None = None  # the Debian root the lab's Slurm runs in; None: the host's Slurm

    @property
    def prefix(self) -> list[str]:
        return ["/usr/sbin/chroot", self.chroot] if self.chroot else []

    def run(self, *argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self.prefix, *argv], input=stdin, text=True, capture_output=True, timeout=60,
                                env={**os.environ, "SLURM_CONF": str(self.conf)})
        if check and result.returncode != 0:
            raise AssertionError(f"{argv} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def sbatch(self, *args: str) -> str:
        return self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def user_dir(self, user: str) -> Path:
        """A directory of the lab's that `user` (goodput-alice, goodput-mallory) owns and writes."""
        return self.dir / "work" / user

    def sbatch_as(self, user: str, *args: str, script: str) -> str:
        """Submit `script` as an unprivileged lab user, the way that user would: from their own
        directory, with nothing of the test process's environment."""
        home = self.user_dir(user)
        path = home / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        path.chmod(0o755)
        # chroot(1) always starts in the root's /: change to the user's directory there, as runuser
        in_dir = ["sh", "-c", 'cd "$0" && exec "$@"', str(home)] if self.chroot else []
        result = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"SLURM_CONF={self.conf}", *self.prefix,
                                 "/usr/sbin/runuser", "-u", user, "--", *in_dir, "sbatch", "--parsable", *args,
                                 str(path)],
                                cwd=home, text=True, capture_output=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"sbatch as {user} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout.strip().split(";")[0]

    def node(self, name: str) -> dict[str, str]:
        return split_record(self.run("scontrol", "show", "node", "-o", name).stdout)

    def reset(self) -> None:
        """Cancel every job and resume every node a test drained or downed."""
        ids = self.run("squeue", "--noheader", "--format=%i", check=False).stdout.split()
        if ids:
            self.run("scancel", *ids, check=False)
        # a test's reservation (the contract suite's spare pool) would keep its nodes "reserved"
        for name in re.findall(r"ReservationName=(\S+)", self.run("scontrol", "show", "reservation", "-o",
                                                                   check=False).stdout):
            wait_until(lambda name=name: self.run("scontrol", "delete", f"ReservationName={name}", check=False),
                       lambda done: done.returncode == 0 or "invalid" in f"{done.stdout} {done.stderr}".lower(),
                       timeout=20, interval=0.5, what=f"reservation {name} deleted")  # busy while jobs end
        for record in split_records(self.run("scontrol", "show", "node", "-o").stdout):
            node = node_from_record(record)
            if node.drained or node.state in {"DOWN", "FAIL"}:
                self.run("scontrol", "update", f"NodeName={node.name}", "State=RESUME", check=False)
        wait_until(lambda: self.run("sinfo", "--noheader", "--Node", "--format=%T", check=False).stdout.split(),
                   lambda states: bool(states) and set(states) <= {"idle"}, timeout=20, interval=0.2,
                   what="lab nodes to return to idle")


def _unavailable(message: str) -> NoReturn:
    unavailable(message)


def _missing() -> list[str]:
    missing = [c for c in REQUIRED if shutil.which(c) is None]
    if os.geteuid() != 0:
        missing.append("root (the lab runs slurmd as root)")
    return missing


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[Lab]:
    missing = _missing()
    if missing:
        _unavailable(f"Slurm lab unavailable, missing: {', '.join(missing)}; "
                     "run `sudo bash scripts/slurm-lab/install.sh --all`")
    env = {**os.environ, "SLURMLAB_DIR": str(LAB_DIR)}
    up = subprocess.run(["bash", str(SCRIPTS / "up.sh")], env=env, text=True, capture_output=True,
                        timeout=120)
    if up.returncode not in (0, 3):  # 3: a lab already runs there; reuse it, leave it running
        pytest.fail(f"scripts/slurm-lab/up.sh failed ({up.returncode}):\n{up.stdout}\n{up.stderr}",
                    pytrace=False)
    conf = LAB_DIR / "etc" / "slurm.conf"
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", str(conf))
    lab = Lab(dir=LAB_DIR, conf=conf, started_here=up.returncode == 0)
    try:
        lab.reset()
        yield lab
    finally:
        patch.undo()
        if lab.started_here:
            subprocess.run(["bash", str(SCRIPTS / "down.sh")], env=env, capture_output=True, timeout=120)


@pytest.fixture
def lab(slurm_lab: Lab) -> Iterator[Lab]:
    """The lab, reset (no jobs, no drains) after the test."""
    yield slurm_lab
    slurm_lab.reset()


# Slurm versions a lab runs in a Debian root (scripts/slurm-lab/root.sh), each on its own ports:
# the 22.05 lab's plus this offset, in the 22.05 lab's directory plus "-<version>".
VERSION_PORT_OFFSET = {"24.11": 1000, "26.05": 2000}


def selected_versions() -> set[str]:
    """The newer Slurm versions this run starts labs for (GOODPUT_SLURM_VERSIONS=24.11,26.05)."""
    return {v.strip() for v in os.environ.get("GOODPUT_SLURM_VERSIONS", "").split(",") if v.strip()}


def version_lab_env(version: str) -> dict[str, str]:
    """The SLURMLAB_* settings of the lab on Slurm `version`: distinct directory and ports."""
    offset = VERSION_PORT_OFFSET[version]
    ports = {"SLURMLAB_CTL_PORT": 16817, "SLURMLAB_SLURMD_BASEPORT": 16900, "SLURMLAB_REST_PORT": 16820}
    env = {key: str(int(os.environ.get(key, default)) + offset) for key, default in ports.items()}
    return {**env, "SLURMLAB_DIR": f"{LAB_DIR}-{version}", "SLURMLAB_SLURM": version}


class VersionLabs:
    """Labs on newer Slurm, only for the versions this run selected: started on first use (a lab
    of that version already up is reused) and torn down at the end if started here."""

    def __init__(self) -> None:
        self.labs: dict[str, Lab] = {}
        self.envs: dict[str, dict[str, str]] = {}
        self.restds: dict[str, Restd] = {}
        self.restd_pids: list[tuple[Lab, Path]] = []

    def get(self, version: str) -> Lab:
        if version in self.labs:
            return self.labs[version]
        env = {**os.environ, **version_lab_env(version)}
        lab_dir = Path(env["SLURMLAB_DIR"])
        # Only when selected, even if such a lab is up: CI runs the main suite beside
        # `make test-slurm-matrix`, whose lab this run must not reset under it.
        if version not in selected_versions():
            pytest.skip(f"Slurm {version} not selected: `make test-slurm-matrix`, or GOODPUT_SLURM_VERSIONS="
                        f"{version} (builds its Debian root once, about two minutes)")
        running = _lab_pid(Lab(dir=lab_dir, conf=lab_dir, started_here=False), lab_dir / "slurmctld.pid")
        if running is None and (os.geteuid() != 0 or shutil.which("debootstrap") is None):
            _unavailable(f"Slurm {version} lab needs root and debootstrap (apt-get install debootstrap)")
        up = subprocess.run(["bash", str(SCRIPTS / "up.sh")], env=env, text=True, capture_output=True,
                            timeout=900)  # the first run builds the root
        if up.returncode not in (0, 3):
            pytest.fail(f"up.sh --slurm {version} failed ({up.returncode}):\n{up.stdout}\n{up.stderr}",
                        pytrace=False)
        settings = dict(line.split("=", 1) for line in (lab_dir / "lab.env").read_text().splitlines() if "=" in line)
        lab = Lab(dir=lab_dir, conf=lab_dir / "etc" / "slurm.conf", started_here=up.returncode == 0,
                  version=version, chroot=settings.get("SLURMLAB_CHROOT") or None)
        self.labs[version], self.envs[version] = lab, env
        lab.reset()
        return lab

    def restd(self, version: str) -> Restd:
        """slurmrestd (JWT, 127.0.0.1) inside the root of `version`'s lab, started on first use."""
        lab = self.get(version)
        if version not in self.restds:
            pid_file = lab.dir / "slurmrestd.pid"
            was_running = _lab_pid(lab, pid_file) is not None
            up = subprocess.run(["bash", str(SCRIPTS / "restd-up.sh")], env=self.envs[version], text=True,
                                capture_output=True, timeout=60)
            if up.returncode != 0:
                pytest.fail(f"restd-up.sh (Slurm {version}) failed ({up.returncode}): {up.stderr}", pytrace=False)
            self.restds[version] = _restd_from(up.stdout)
            if not was_running:
                self.restd_pids.append((lab, pid_file))
        return self.restds[version]

    def close(self) -> None:
        for lab, pid_file in self.restd_pids:
            pid = _lab_pid(lab, pid_file)
            if pid is not None and not lab.started_here:  # down.sh stops it with the lab
                os.kill(pid, 15)
        for version, lab in self.labs.items():
            if lab.started_here:
                subprocess.run(["bash", str(SCRIPTS / "down.sh")], env=self.envs[version], capture_output=True,
                               timeout=120)


@pytest.fixture(scope="session")
def version_labs() -> Iterator[VersionLabs]:
    labs = VersionLabs()
    try:
        yield labs
    finally:
        labs.close()


@pytest.fixture(scope="session")
def sshd(slurm_lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from private_sshd(tmp_path_factory)


@pytest.fixture(scope="session")
def version_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """The same private sshd for the newer-Slurm cells, without starting the 22.05 lab (which CI's
    main suite, running beside the matrix, owns)."""
    yield from private_sshd(tmp_path_factory)


@dataclass
class Restd:
    url: str
    user: str
    token: str


@pytest.fixture(scope="session")
def slurmrestd(slurm_lab: Lab) -> Iterator[Restd]:
    """slurmrestd with JWT on 127.0.0.1 for the lab; stopped again if this fixture started it."""
    if shutil.which("slurmrestd") is None:
        _unavailable("slurmrestd missing; run `sudo bash scripts/slurm-lab/install.sh --all`")
    pid_file = slurm_lab.dir / "slurmrestd.pid"
    was_running = _lab_pid(slurm_lab, pid_file) is not None
    env = {**os.environ, "SLURMLAB_DIR": str(slurm_lab.dir)}
    up = subprocess.run(["bash", str(SCRIPTS / "restd-up.sh")], env=env, text=True, capture_output=True,
                        timeout=60)
    if up.returncode != 0:
        pytest.fail(f"restd-up.sh failed ({up.returncode}): {up.stderr}", pytrace=False)
    try:
        yield _restd_from(up.stdout)
    finally:
        pid = _lab_pid(slurm_lab, pid_file)
        if pid is not None and not was_running:
            os.kill(pid, 15)


def _restd_from(exports_text: str) -> Restd:
    """The URL, user and token restd-up.sh printed as shell exports."""
    exports = dict(line.removeprefix("export ").split("=", 1) for line in exports_text.splitlines()
                   if line.startswith("export "))
    return Restd(url=exports["SLURMREST_URL"], user=exports["SLURMREST_USER"], token=exports["SLURMREST_TOKEN"])


def _lab_pid(lab: Lab, pid_file: Path) -> int | None:
    """The pid in a lab pid file, only if that process carries the lab's tag (as down.sh checks)."""
    try:
        pid = int(pid_file.read_text().strip())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if f"SLURMLAB_TAG={lab.dir}".encode() in environ else None


# What slurmctld (SlurmctldDebug=info) logs when a job is acted on, not merely scheduled or ended.
ACTION = re.compile(r"requeu|kill_job|signal|update_job|hold|suspend", re.IGNORECASE)


@dataclass
class SlurmRecords:
    """slurmctld's own log from where a test began: what Slurm itself recorded, not goodput's timeline."""

    log: Path
    start: int

    def text(self) -> str:
        with self.log.open("rb") as raw:
            raw.seek(self.start)
            return raw.read().decode("utf-8", "replace")

    def drains(self, node: str) -> list[str]:
        return re.findall(rf"update_node: node {re.escape(node)} reason set to: (goodput:\S+)", self.text())

    def requeues(self, job_id: str) -> int:
        return len(re.findall(rf"Requeuing JobId={re.escape(job_id)}\b", self.text()))

    def submissions(self) -> list[str]:
        return re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", self.text())

    def actions_on(self, job_id: str, *aliases: str) -> list[str]:
        """slurmctld's lines of anything done to the job: a requeue, a kill or cancel, a signal, an
        update, a hold or release. An array task is `JobId=<array>_<task>(<job id>)` in some of
        them and `JobId=<array>_<task>` (pass it as an alias) in others."""
        ids = "|".join(re.escape(i) for i in (job_id, *aliases))
        named = re.compile(rf"JobId=(?:(?:{ids})\b(?!\()|\d+_\d+\({re.escape(job_id)}\))")
        return [line for line in self.text().splitlines() if named.search(line) and ACTION.search(line)]


@pytest.fixture
def records(lab: Lab) -> Iterator[SlurmRecords]:
    log = lab.dir / "log" / "slurmctld.log"
    yield SlurmRecords(log, log.stat().st_size)
