"""The Slurm lab both lab benchmarks stand on (`latency`, `storm-lab`), and the reader of its slurmctld log.

One rig, so the two benchmarks bring a lab up, tear it down and read Slurm's own record the same way:

* the lab (scripts/slurm-lab) in a directory and on ports of the benchmark's own, so it never meets
  the test suite's labs or another benchmark's on a shared machine; `BENCH_SLURMLAB_DIR`,
  `BENCH_SLURMLAB_CTL_PORT`, `BENCH_SLURMLAB_SLURMD_BASEPORT` and `BENCH_SLURMLAB_REST_PORT` move it
  (never the tests' `SLURMLAB_*`: the benchmark takes its lab down when it ends);
* a lab left up by an interrupted run of the same benchmark is started afresh, never reused;
* slurmctld stamps each line in local time to the millisecond (its default
  `LogTimeFormat=iso8601_ms`); the parser is pure, so tests check it on recorded lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from benchmarks import _slurm_root

REPO = Path(__file__).resolve().parents[1]
LAB_SCRIPTS = REPO / "scripts" / "slurm-lab"


@dataclass(frozen=True)
class LabSite:
    """Where one benchmark's lab lives: its directory and its ports."""

    dir: Path
    ctl_port: int
    slurmd_baseport: int
    rest_port: int

    def env(self) -> dict[str, str]:
        return {"SLURMLAB_DIR": str(self.dir), "SLURMLAB_CTL_PORT": str(self.ctl_port),
                "SLURMLAB_SLURMD_BASEPORT": str(self.slurmd_baseport), "SLURMLAB_REST_PORT": str(self.rest_port)}

    def moved_by(self, environ: Mapping[str, str]) -> LabSite:
        """This site, with whatever `BENCH_SLURMLAB_*` says instead."""
        return LabSite(Path(environ.get("BENCH_SLURMLAB_DIR", self.dir)),
                       int(environ.get("BENCH_SLURMLAB_CTL_PORT", self.ctl_port)),
                       int(environ.get("BENCH_SLURMLAB_SLURMD_BASEPORT", self.slurmd_baseport)),
                       int(environ.get("BENCH_SLURMLAB_REST_PORT", self.rest_port)))


def ensure_slurm_installed() -> None:
    """The lab needs Debian's Slurm and munge packages; install them as `make test` does."""
    if shutil.which("slurmctld") and shutil.which("sbatch"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("Slurm is not installed: run `sudo bash scripts/slurm-lab/install.sh` first")
    subprocess.run(["bash", str(LAB_SCRIPTS / "install.sh")], check=True, timeout=900)


@dataclass
class Lab:
    dir: Path
    env: dict[str, str]
    slurm: str = "22.05"  # the lab's Slurm: the host's, or a Debian root's (benchmarks/_slurm_root.py)

    def shell(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", f'. "{LAB_SCRIPTS}/env.sh" && {script}'], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    @property
    def slurmctld_log(self) -> Path:
        return self.dir / "log" / "slurmctld.log"

    @property
    def slurmctld_pid(self) -> int | None:
        return _pid_from(self.dir / "slurmctld.pid")

    def slurmd_pid(self, node: str) -> int | None:
        return _pid_from(self.dir / f"slurmd-{node}.pid")

    def kill_slurmd(self, node: str) -> None:
        pid = self.slurmd_pid(node)
        if pid is None or f"SLURMLAB_TAG={self.dir}".encode() not in Path(f"/proc/{pid}/environ").read_bytes():
            raise RuntimeError(f"no slurmd of this lab for {node}")
        os.kill(pid, signal.SIGKILL)

    def start_slurmd(self, node: str) -> None:
        self.shell(f"slurmlab_start_slurmd {node}")

    def resume_node(self, node: str) -> None:
        """Back into service after a fault the benchmark caused (drain or DOWN), as an operator would."""
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True, timeout=30)

    def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld re-reads its configuration and rebuilds its select
        plugin's node usage from the jobs it holds."""
        subprocess.run(["scontrol", "reconfigure"], capture_output=True, timeout=60)

    def node_state(self, node: str) -> str:
        out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip()


def _lab_script(script: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(LAB_SCRIPTS / script)], env=dict(env), capture_output=True, text=True,
                          timeout=180)


@contextmanager
def slurm_lab(site: LabSite, nodes: int, cpus: int, extra_env: Mapping[str, str] | None = None,
              slurm: str = "22.05") -> Iterator[Lab]:
    """The lab, up for the whole benchmark; SLURM_CONF is exported for this process meanwhile.
    `extra_env` sets more of scripts/slurm-lab/env.sh's knobs (SLURMLAB_SLURMD_TIMEOUT). On a
    newer `slurm` (a Debian root) PATH leads to the root's Slurm commands meanwhile, for this
    process and for every process it starts with the lab's `env`."""
    site = _slurm_root.lab_site(site, slurm)
    if slurm == _slurm_root.HOST_VERSION:
        ensure_slurm_installed()
    env = {**os.environ, **site.env(), "SLURMLAB_NODES": str(nodes), "SLURMLAB_CPUS": str(cpus),
           "SLURMLAB_SLURM": slurm if slurm != _slurm_root.HOST_VERSION else "host", **(extra_env or {})}
    up = _lab_script("up.sh", env)
    if up.returncode == 3:  # this benchmark's own lab, left up by an interrupted run: start afresh
        _lab_script("down.sh", env)
        up = _lab_script("up.sh", env)
    if up.returncode != 0:
        raise RuntimeError(f"slurm lab did not start: {up.stdout}\n{up.stderr}")
    previous = {key: os.environ.get(key) for key in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"] = str(site.dir / "etc" / "slurm.conf")
    try:
        if slurm != _slurm_root.HOST_VERSION:
            shims = _slurm_root.write_shims(site.dir / "shims", _slurm_root.root_dir(slurm, env))
            os.environ["PATH"] = f"{shims}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        yield Lab(site.dir, {**env, "SLURM_CONF": os.environ["SLURM_CONF"], "PATH": os.environ["PATH"]}, slurm)
    finally:
        _lab_script("down.sh", env)
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _pid_from(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


# -- slurmctld's log ----------------------------------------------------------------------------

SlurmEventKind = Literal["drain", "requeue", "submit", "exclude", "start"]

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?)\] ")
_EVENTS: tuple[tuple[SlurmEventKind, re.Pattern[str]], ...] = (
    ("drain", re.compile(r"update_node: node (\S+) reason set to: goodput:")),
    ("requeue", re.compile(r"Requeuing JobId=(\d+)\b")),
    ("submit", re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+)\b")),
    # goodput's requeue of a job on a node that stopped answering: Slurm takes the hold and the
    # exclusion at once but logs "Requeuing" only when the node is declared DOWN.
    ("exclude", re.compile(r"_update_job: setting exc_nodes to \S+ for JobId=(\d+)\b")),
    # A job (re)started, by the backfill scheduler or the main one.
    ("start", re.compile(r"sched/backfill: _start_job: Started JobId=(\d+)\b|sched: Allocate JobId=(\d+)\b")),
)


@dataclass(frozen=True)
class SlurmEvent:
    """One action slurmctld logged: a node given goodput's drain reason, a job requeued, submitted,
    kept off nodes or started."""

    at: datetime
    kind: SlurmEventKind
    subject: str  # node name for drains, job id otherwise


def slurmctld_events(text: str) -> list[SlurmEvent]:
    """The drains (with goodput's reason), requeues, batch submissions, node exclusions and job
    starts in slurmctld's log text, in the log's order.

    Lines without a timestamp (a torn last line) are skipped; times are local, made aware."""
    events: list[SlurmEvent] = []
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        for kind, pattern in _EVENTS:
            found = pattern.search(line, stamp.end())
            if found:
                subject = next(g for g in found.groups() if g is not None)
                events.append(SlurmEvent(at=datetime.fromisoformat(stamp.group(1)).astimezone(), kind=kind,
                                         subject=subject))
                break
    return events
