"""The rig `storm-lab` stands on: a Slurm lab, a Temporal dev server that can be counted, worker processes.

Kept apart from benchmarks/storm_lab.py so that the benchmark reads as the experiment and this as
the apparatus. Everything here is measuring equipment that adds nothing to what goodput does:

* the Slurm lab (benchmarks/_slurm_lab.py, shared with `latency`) in its own directory and on its
  own ports, so that it never meets the other labs on a shared machine;
* the Temporal dev server started with the arguments `goodput up` uses (workers.devserver), plus
  `--metrics-port` (its Prometheus counters: RPCs and persistence requests by operation) and
  `--log-config` (it prints its configuration, so the history shard count is read, not assumed);
* N real `goodput worker` processes, configured through GOODPUT_* as an operator would;
* shims in front of the Slurm commands (one `printf` into a log, then `exec` of the real binary),
  so that every Slurm command a worker runs is counted;
* /proc readers for CPU time, and, from the shared reader of slurmctld's own log, when it requeued
  and started each job.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._harness import free_port
from benchmarks._slurm_lab import Lab, LabSite, slurmctld_events
from workers import devserver

# This benchmark's lab only: other labs on the machine use other directories and ports.
LAB = LabSite(Path("/tmp/goodput-storm-lab"), ctl_port=27817, slurmd_baseport=27900, rest_port=27820)
SHIMMED = ("scontrol", "squeue", "sinfo", "sbatch", "scancel", "sacct")
TICK = os.sysconf("SC_CLK_TCK")


# -- Slurm ---------------------------------------------------------------------------------------

def slurm_shims(directory: Path, log: Path) -> Path:
    """A directory to put first on a worker's PATH: each Slurm command logs `name arg1 arg2 arg3
    @epoch` (when it was run), then execs the real one (one extra /bin/sh exec and a `date` per
    command, a few milliseconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in SHIMMED:
        real = shutil.which(name)
        if real is None:
            continue
        shim = directory / name
        shim.write_text(f"#!/bin/sh\nprintf '%s %s %s %s @%s\\n' {name} \"${{1-}}\" \"${{2-}}\" \"${{3-}}\" "
                        f"\"$(date +%s.%N)\" >> '{log}'\n"
                        f"exec '{real}' \"$@\"\n")
        shim.chmod(0o755)
    return directory


def shim_commands(log: Path) -> list[tuple[str, float | None]]:
    """The shims' log read once: each command as `name arg1 arg2 arg3`, with when it ran (epoch
    seconds; None on a line without its ` @epoch`). The one reader of the shims' line format."""
    commands: list[tuple[str, float | None]] = []
    with contextlib.suppress(FileNotFoundError):
        for line in log.read_text().splitlines():
            command, _, stamp = line.rpartition(" @")
            try:
                commands.append((command, float(stamp)))
            except ValueError:
                commands.append((line, None))
    return commands


def slurm_commands(log: Path) -> Counter[str]:
    """Commands the shims saw: `scontrol show job`, `scontrol requeue`, `squeue --json`..."""
    counts: Counter[str] = Counter()
    for command, _ in shim_commands(log):
        name, _, rest = command.partition(" ")
        args = rest.split()
        shown = args[:2] if name == "scontrol" and args[:1] == ["show"] else args[:1]
        counts[" ".join([name, *shown])] += 1
    return counts


def requeues_sent(log: Path) -> dict[str, float]:
    """When a worker first ran `scontrol requeue` (or `requeuehold`) for each job, from the shims'
    log (epoch seconds): goodput's part of a requeue ends there. slurmctld logs `Requeuing` only
    once the job's processes ended and its epilog ran on its nodes, here on the same two cores."""
    sent: dict[str, float] = {}
    for command, at in shim_commands(log):
        fields = command.split()
        if at is None or len(fields) < 3 or fields[0] != "scontrol" or fields[1] not in ("requeue", "requeuehold"):
            continue
        for job in fields[2].split(","):
            sent.setdefault(job, at)
    return sent


@dataclass
class SlurmEvents:
    requeued: dict[str, list[float]] = field(default_factory=dict)
    started: dict[str, list[float]] = field(default_factory=dict)


def job_events(log: Path, jobs: set[str], since: float) -> SlurmEvents:
    """slurmctld's own record (epoch seconds, ms resolution): when it requeued and (re)started each job."""
    events = SlurmEvents()
    for event in slurmctld_events(log.read_text(errors="replace")):
        at = event.at.timestamp()
        if event.kind in ("requeue", "start") and event.subject in jobs and at >= since:
            target = events.requeued if event.kind == "requeue" else events.started
            target.setdefault(event.subject, []).append(at)
    return events


def job_lines(log: Path, job: str, limit: int = 20) -> list[str]:
    """slurmctld's last `limit` lines about `job`: the evidence kept when a job was requeued more
    than once, so that whose requeue it was (goodput's, or Slurm's own after a failed launch) can
    be read later rather than lost with the lab's next run."""
    pattern = re.compile(rf"JobId={job}(?!\d)")
    return [line[:300] for line in log.read_text(errors="replace").splitlines() if pattern.search(line)][-limit:]


def restarts(jobs: set[str]) -> dict[str, tuple[str, int]]:
    """JobState and Restarts of each job, from one `scontrol show job -o` (the lab's own jobs)."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, timeout=60).stdout
    found: dict[str, tuple[str, int]] = {}
    for line in out.splitlines():
        job = re.match(r"JobId=(\d+) ", line)
        state, count = re.search(r" JobState=(\S+)", line), re.search(r" Restarts=(\d+)", line)
        if job and job[1] in jobs and state and count:
            found[job[1]] = (state[1], int(count[1]))
    return found


# -- Temporal ------------------------------------------------------------------------------------

@dataclass
class Temporal:
    address: str
    metrics_url: str
    proc: subprocess.Popen[bytes]
    log_file: Path

    def config(self, key: str) -> str:
        """A value from the configuration the server printed at start (`--log-config`)."""
        match = re.search(rf"^\s*{key}:\s*(\S+)", self.log_file.read_text(errors="replace"), re.MULTILINE)
        return match[1] if match else "unknown"

    def scrape(self) -> dict[tuple[str, str, str], float]:
        """(metric, service, operation) → value, for the counters this benchmark reads."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        values: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            if name not in ("service_requests", "persistence_requests", "persistence_latency_sum",
                            "persistence_latency_count") and not name.startswith("service_error"):
                continue
            labels, _, value = rest.rpartition("} ")
            service = re.search(r'service_name="([^"]*)"', labels)
            operation = re.search(r'operation="([^"]*)"', labels)
            kind = re.search(r'error_type="([^"]*)"', labels)  # service_error_with_type: what was refused
            key = (name, service[1] if service else "",
                   (operation[1] if operation else "") + (f" {kind[1]}" if kind else ""))
            values[key] = values.get(key, 0.0) + float(value)
        return values


@contextlib.contextmanager
def temporal_server(directory: Path) -> Iterator[Temporal]:
    """`temporal server start-dev` as `goodput up` starts it (SQLite with WAL), plus metrics and
    its printed configuration."""
    port, metrics = free_port(), free_port()
    log_file = directory / "temporal.log"
    cmd = [devserver.temporal_binary(), "server", "start-dev", "--port", str(port),
           *devserver.dev_server_args(port=port, ui_port=None, db_file=directory / "temporal.db", wal=True),
           "--metrics-port", str(metrics), "--log-config"]
    with log_file.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not devserver.port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"temporal dev server did not start; see {log_file}")
            time.sleep(0.1)
        yield Temporal(f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics", proc, log_file)
    finally:
        devserver.stop(proc)


# -- worker processes ----------------------------------------------------------------------------

@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    output: Path


def compile_workflows() -> None:
    """Bytecode for workflows/, as an installed package has it, once before any worker starts: with
    PYTHONDONTWRITEBYTECODE set (this project's machines set it) every new workflow's sandbox
    compiled workflows/*.py from source, 8 % of a storm worker's CPU samples (py-spy, 2026-12-04)."""
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "workflows"), quiet=1)


def start_workers(count: int, env: Mapping[str, str], root: Path, goodput: Path) -> list[Worker]:
    """`goodput worker` × count, each with a data directory of its own (as on separate head nodes)."""
    workers = []
    for i in range(count):
        data = root / f"worker-{i}"
        data.mkdir(parents=True)
        output = data / "worker.out"
        with output.open("wb") as out:
            proc = subprocess.Popen([str(goodput), "worker"], cwd=data, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={**env, "GOODPUT_DATA_DIR": str(data),
                                         "GOODPUT_CONFIG": str(data / "goodput.toml")})
        workers.append(Worker(proc, data, output))
    deadline = time.monotonic() + 120
    for worker in workers:
        while "goodput worker on" not in worker.output.read_text(errors="replace"):
            if worker.proc.poll() is not None or time.monotonic() > deadline:
                stop_workers(workers)
                raise RuntimeError(f"a worker did not start: {worker.output.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
    return workers


def stop_workers(workers: list[Worker]) -> None:
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait(timeout=10)


class Terminated(BaseException):
    """SIGTERM or SIGINT: unwinds the benchmark through every `finally` and `with` that stops what it
    started (workers, jobs, the dev server, the lab). A BaseException, so no `except Exception` of
    the measurement swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def taken_down_on_signal() -> Iterator[None]:
    """Turns SIGTERM and SIGINT into `Terminated` meanwhile: their default would end this process at
    once and leave the lab's daemons, the dev server and the workers (each in a session of its own)
    running. Further signals are ignored while the teardown runs; SIGKILL still ends it."""
    def stop(signum: int, _frame: object) -> None:
        for each in (signal.SIGTERM, signal.SIGINT):
            signal.signal(each, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {each: signal.signal(each, stop) for each in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


# -- snapshots and what a round cost ------------------------------------------------------------

# The benchmark's own calls (waiting for completion), not part of what an incident costs.
OBSERVER_RPCS = {"CountWorkflowExecutions"}


def snapshot(temporal: Temporal, workers: list[Worker], lab: Lab) -> dict[str, Any]:
    ctld = lab.slurmctld_pid
    return {"metrics": temporal.scrape(), "workers": [cpu_seconds(w.proc.pid) for w in workers],
            "server": cpu_seconds(temporal.proc.pid)[0], "slurmctld": cpu_seconds(ctld)[0] if ctld else 0.0,
            "injector": sum(os.times()[:2]), "machine": machine_cpu(), "at": time.time()}


def cost(before: dict[str, Any], after: dict[str, Any], incidents: int) -> dict[str, Any]:
    """What the round cost, in total and per incident, from two snapshots."""
    delta = {k: after["metrics"].get(k, 0.0) - before["metrics"].get(k, 0.0) for k in after["metrics"]}
    rpcs = Counter({op: v for (name, svc, op), v in delta.items()
                    if name == "service_requests" and svc == "frontend" and op not in OBSERVER_RPCS and v > 0})
    persistence = sum(v for (name, _, _), v in delta.items() if name == "persistence_requests")
    persistence_ops: Counter[str] = Counter()
    for (name, _, op), v in delta.items():  # one operation is counted by each service that asks it
        if name == "persistence_requests" and v > 0:
            persistence_ops[op] += v
    latency_sum = sum(v for (name, _, _), v in delta.items() if name == "persistence_latency_sum")
    latency_n = sum(v for (name, _, _), v in delta.items() if name == "persistence_latency_count")
    workers = sum(a[0] - b[0] for a, b in zip(after["workers"], before["workers"], strict=True))
    children = sum(a[1] - b[1] for a, b in zip(after["workers"], before["workers"], strict=True))
    server = after["server"] - before["server"]
    spent = {"workers": workers, "slurm_commands": children, "temporal": server,
             "slurmctld": after["slurmctld"] - before["slurmctld"], "injector": after["injector"] - before["injector"]}
    machine = after["machine"][0] - before["machine"][0]
    wall = after["at"] - before["at"]
    busy = machine / max(1e-9, after["machine"][1] - before["machine"][1])
    n = max(1, incidents)
    return {
        "window_s": round(wall, 1), "machine_busy": round(busy, 3),
        "frontend_rpcs_per_incident": round(sum(rpcs.values()) / n, 1),
        "rpcs_per_incident_by_operation": {op: round(v / n, 2) for op, v in rpcs.most_common(12)},
        "persistence_requests_per_incident": round(persistence / n, 1),
        "persistence_latency_ms_mean": round(1000 * latency_sum / latency_n, 2) if latency_n else float("nan"),
        # The dev server's SQLite store has one connection (the plugin's default), so every request
        # waits for the one before: which requests an incident costs is what to cut.
        "persistence_requests_per_incident_by_operation": {op: round(v / n, 2)
                                                           for op, v in persistence_ops.most_common(24)},
        # Seconds spent inside persistence calls (waits for the one connection included) per second of the window.
        "persistence_seconds_per_second": round(latency_sum / wall, 2) if wall > 0 else float("nan"),
        "server_errors": {f"{name} {svc} {op}": v for (name, svc, op), v in sorted(delta.items())
                          if name.startswith("service_error") and v > 0},
        # The machine's busy time less the above: mostly the lab's compute side (slurmd, slurmstepd,
        # the jobs' own start-up), which a real head node does not carry.
        "cpu_s": {**{k: round(v, 2) for k, v in spent.items()},
                  "rest_of_machine": round(machine - sum(spent.values()), 2)},
        "cpu_ms_per_incident": {"workers": round(1000 * workers / n, 1),
                                "slurm_commands": round(1000 * children / n, 1),
                                "temporal": round(1000 * server / n, 1)},
        "cores_busy": {"workers": round((workers + children) / wall, 2),
                       "temporal": round(server / wall, 2)},
    }



# -- CPU -----------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own user+system CPU, that of its children it has reaped) in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan"), float("nan")
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]  # guest is in user
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK
