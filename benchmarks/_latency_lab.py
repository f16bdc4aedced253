"""The latency benchmark's rig: its own Slurm lab, goodput as shipped, and the faults it injects.

goodput runs here as an operator runs it: a `goodput worker` process and one `goodput agent`
process per node, configured only through `GOODPUT_*` variables, so every setting the benchmark
does not name is the shipped default. The jobs are bash loops that print a progress line every
0.2 s (1 s for `hang`) and act out a fault when the benchmark writes its name to a control file;
Xids go into a node's kernel-log file, node failures are a SIGKILLed slurmd; a node loss kills, at
once, the node's slurmd, the job's slurmstepd and processes, and the node's agent, as a node that
lost power would lose them. The `slow-phase` job prints a slow start-up, checkpoint save and
evaluation instead, and must open no incident.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import _slurm_lab
from benchmarks._slurm_lab import Lab, LabSite
from goodput.detect.node_liveness import heartbeat_token

GOODPUT = Path(sys.executable).with_name("goodput")

NCCL = ("[rank0]:[E1129 06:22:43.551920 41877 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=96022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600083 milliseconds before timing out.")
XID_79 = "{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
JOB = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
run="$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}"
ctl={dir}/ctl-$run
every=${{BENCH_STEP_S:-0.2}}
ms=${{BENCH_STEP_MS:-200.0}}
step=0
while true; do
  step=$((step + 1))
  echo "run $run iteration $step/ 100000 | elapsed time per iteration (ms): $ms"
  if [ -f "$ctl" ]; then
    case "$(cat "$ctl")" in
      crash) echo '{nccl}'; exit 1 ;;
      app-error) printf '%s\\n' 'Traceback (most recent call last):' '  File "/work/train.py", line 12, in <module>' \\
                   '    lr = config["lr_schedule"]' "KeyError: 'lr_schedule'"; exit 1 ;;
      hang) exec sleep 100000 ;;
    esac
  fi
  sleep "$every"
done
"""

# The `slow-phase` class's job: a 1 s step and phases slow by nature, printed as Megatron-LM prints
# them (goodput.detect.phases), then a clean exit. It must open no incident.
SLOW_PHASE_JOB = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
run="$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}"
step=5000
steps() {{
  for _ in $(seq {steps}); do
    step=$((step + 1))
    echo "run $run iteration $step/ 100000 | elapsed time per iteration (ms): 1000.0"
    sleep 1
  done
}}
echo "run $run  loading checkpoint from {dir}/ckpt at iteration $step"
sleep {startup_s}
echo "run $run  successfully loaded checkpoint from {dir}/ckpt [ t 1/1, p 1/1 ] at iteration $step"
steps
echo "run $run saving checkpoint at iteration $step to {dir}/ckpt in torch_dist format"
sleep {save_s}
echo "run $run   successfully saved checkpoint from iteration $step to {dir}/ckpt [ t 1/1, p 1/1 ]"
steps
echo "run $run Evaluating iter 1/100"
sleep {eval_s}
echo "run $run  validation loss at iteration $step | lm loss value: 2.412E+00 | lm loss PPL: 1.116E+01 |"
steps
echo "run $run slow phases done"
"""
# The phases: a 4-minute start-up, a 3-minute checkpoint save, a 2-minute evaluation.
SLOW_PHASES = {"startup_s": 240, "save_s": 180, "eval_s": 120, "steps": 30}


# This benchmark's lab only: the test suite's and storm-lab's use other directories and ports.
LAB = LabSite(Path(tempfile.gettempdir()) / "goodput-bench-slurmlab", ctl_port=26817, slurmd_baseport=26900,
              rest_port=26820)


@asynccontextmanager
async def slurm_lab(nodes: int, cpus: int, slurmd_timeout_s: int = 20, slurm: str = "22.05") -> AsyncIterator[Lab]:
    """The shared lab rig (benchmarks/_slurm_lab.py) on this benchmark's site, SLURM_CONF set inside;
    `slurmd_timeout_s` is the lab's SlurmdTimeout (the lab's 20 s, or Slurm's default 300 s);
    `slurm` the lab's Slurm (24.11, 26.05: in a Debian root, reached through PATH shims)."""
    with _slurm_lab.slurm_lab(LAB.moved_by(os.environ), nodes, cpus, slurm=slurm,
                              extra_env={"SLURMLAB_SLURMD_TIMEOUT": str(slurmd_timeout_s)}) as lab:
        yield lab


def enable_expedited_requeue(lab: Lab) -> None:
    """26.05's faster requeue path (new in 25.11), a site setting: a job submitted with
    `--requeue=expedite` is eligible again at once instead of after cred_expire + 1 s."""
    with (lab.dir / "etc" / "slurm.conf").open("a") as conf:
        conf.write("SlurmctldParameters=enable_expedited_requeue\n")
    subprocess.run(["scontrol", "reconfigure"], capture_output=True, timeout=60, check=True)


def job_workdir(lab: Lab, chosen: Path) -> Path:
    """Where job scripts, outputs and control files go: `chosen` on the host's Slurm; on a root's,
    the lab's own directory, the one path up.sh mounts at the same place inside the root."""
    workdir = chosen if lab.slurm == "22.05" else lab.dir / "work" / "latency"
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    return workdir


def slurm_version() -> str:
    """What the Slurm commands on PATH (the shims, on a root) report: `slurm-wlm 24.11.5` -> `24.11.5`."""
    done = subprocess.run(["scontrol", "--version"], capture_output=True, text=True, timeout=30)
    words = done.stdout.split()
    return words[-1] if words else f"unknown ({done.stderr.strip()[:200]})"


def job_processes(lab: Lab, job: str) -> list[int]:
    """This lab's slurmstepd processes of `job` and every process below them."""
    tag = f"SLURMLAB_TAG={lab.dir}".encode()
    parents: dict[int, int] = {}
    steps: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
            if cmdline.startswith(b"slurmstepd: [" + job.encode() + b".") and tag in (entry / "environ").read_bytes():
                steps.append(int(entry.name))
        except (OSError, ValueError):
            continue
    found, frontier = set(steps), list(steps)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier.extend(children)
    return sorted(found)


def sbatch(script: Path, workdir: Path, name: str, *options: str) -> str:
    """Submits one benchmark job; its output file is named after the job, so a resubmitted copy
    (same name, same --output) appends to the same file."""
    done = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", f"--output={workdir}/{name}.out",
                           f"--chdir={workdir}", *options, str(script)],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip().split(";")[0]


def job_nodes(job_id: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%N"], capture_output=True, text=True, timeout=30)
    return [n for n in out.stdout.strip().split(",") if n]


def node_states() -> dict[str, str]:
    """Each lab node's state as sinfo words it (`idle`, `mixed`, `drained`, `idle*`: not answering)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30)
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if " " in line.strip())


def scancel(*jobs: str) -> None:
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)


def liveness(workdir: Path, cluster: str, nodes: Sequence[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The node-loss class's settings: the heartbeat endpoint on (it needs a secret, so it is off as
    shipped), and each agent's own token; everything else (intervals, thresholds) as shipped."""
    secret = os.urandom(32).hex().encode()
    (workdir / "liveness.secret").write_bytes(secret)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    per_agent = {}
    for node in nodes:
        token = workdir / f"heartbeat-{node}.token"
        token.write_text(heartbeat_token(secret, cluster, node))
        per_agent[node] = {"GOODPUT_AGENT__HEARTBEAT_TOKEN_FILE": str(token)}
    return ({"GOODPUT_LIVENESS__ENABLED": "true", "GOODPUT_LIVENESS__PORT": str(port),
             "GOODPUT_LIVENESS__SECRET_FILE": str(workdir / "liveness.secret"),
             "GOODPUT_AGENT__HEARTBEAT_URL": f"http://127.0.0.1:{port}"}, per_agent)



@dataclass
class Goodput:
    """goodput's processes, as shipped: what they were told is in `overrides`, the rest is default."""

    env: dict[str, str]
    overrides: dict[str, str]
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    agent_args: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, *args: str, log: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.logs / log).open("ab") as out:
            proc = subprocess.Popen([str(GOODPUT), *args], env={**self.env, **(env or {})}, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.logs, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_agent(self, node: str) -> None:
        args, env = self.agent_args[node]
        self.agents[node] = self.start(*args, log=f"agent-{node}.log", env=env)

    def kill_agent(self, node: str) -> None:
        """SIGKILL, as a lost node stops its agent; the benchmark starts it again with the node."""
        proc = self.agents.pop(node)
        proc.kill()
        proc.wait(timeout=10)
        self.procs.remove(proc)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@contextmanager
def goodput_as_shipped(temporal: str, cluster: str, task_queue: str, lab: Lab, workdir: Path,
                       settings: Mapping[str, str], agents: Mapping[str, Path],
                       agent_env: Mapping[str, Mapping[str, str]] | None = None) -> Iterator[Goodput]:
    """`goodput worker` plus `goodput agent --node N --kernel-log F --probe none` per entry of `agents`
    (with `agent_env[N]` added to its environment: its own heartbeat token)."""
    overrides = {"GOODPUT_TEMPORAL_ADDRESS": temporal, "GOODPUT_CLUSTER": cluster,
                 "GOODPUT_TASK_QUEUE": task_queue, "GOODPUT_SCHEDULER": "slurm-cli",
                 "GOODPUT_DATA_DIR": str(workdir / "goodput-data"), **settings}
    env = {**{k: v for k, v in lab.env.items() if not k.startswith("GOODPUT_")}, **overrides,
           "GOODPUT_CONFIG": str(workdir / "no-goodput.toml")}
    service = Goodput(env=env, overrides=overrides, logs=workdir)
    try:
        service.start("worker", log="worker.log")
        for node, kernel_log in agents.items():
            service.agent_args[node] = (["agent", "--node", node, "--kernel-log", str(kernel_log), "--probe", "none"],
                                        dict((agent_env or {}).get(node, {})))
            service.start_agent(node)
        yield service
    finally:
        service.stop()


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(poll_s)
    return False


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
