"""The latency benchmark's rig: its own Slurm lab, goodput as shipped, and the faults it injects.

goodput runs here as an operator runs it: a `goodput worker` process and one `goodput agent`
process per node, configured only through `GOODPUT_*` variables, so every setting the benchmark
does not name is the shipped default. The jobs are bash loops that print a progress line every
0.2 s (1 s for `hang`) and act out a fault when the benchmark writes its name to a control file;
Xids go into a node's kernel-log file, node failures are a SIGKILLed slurmd. The `slow-phase`
job prints a slow start-up, checkpoint save and evaluation instead, and must open no incident.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import _slurm_lab
from benchmarks._slurm_lab import Lab, LabSite

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
async def slurm_lab(nodes: int, cpus: int) -> AsyncIterator[Lab]:
    """The shared lab rig (benchmarks/_slurm_lab.py) on this benchmark's site, SLURM_CONF set inside."""
    with _slurm_lab.slurm_lab(LAB.moved_by(os.environ), nodes, cpus) as lab:
        yield lab


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


def scancel(*jobs: str) -> None:
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)


@dataclass
class Goodput:
    """goodput's processes, as shipped: what they were told is in `overrides`, the rest is default."""

    env: dict[str, str]
    overrides: dict[str, str]
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, *args: str, log: str) -> None:
        with (self.logs / log).open("wb") as out:
            self.procs.append(subprocess.Popen([str(GOODPUT), *args], env=self.env, stdout=out,
                                               stderr=subprocess.STDOUT, cwd=self.logs, start_new_session=True))

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
                       settings: Mapping[str, str], agents: Mapping[str, Path]) -> Iterator[Goodput]:
    """`goodput worker` plus `goodput agent --node N --kernel-log F --probe none` per entry of `agents`."""
    overrides = {"GOODPUT_TEMPORAL_ADDRESS": temporal, "GOODPUT_CLUSTER": cluster,
                 "GOODPUT_TASK_QUEUE": task_queue, "GOODPUT_SCHEDULER": "slurm-cli",
                 "GOODPUT_DATA_DIR": str(workdir / "goodput-data"), **settings}
    env = {**{k: v for k, v in lab.env.items() if not k.startswith("GOODPUT_")}, **overrides,
           "GOODPUT_CONFIG": str(workdir / "no-goodput.toml")}
    service = Goodput(env=env, overrides=overrides, logs=workdir)
    try:
        service.start("worker", log="worker.log")
        for node, kernel_log in agents.items():
            service.start("agent", "--node", node, "--kernel-log", str(kernel_log), "--probe", "none",
                          log=f"agent-{node}.log")
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
