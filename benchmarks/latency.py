"""`latency`: fault → detected → first Slurm action → running again, on a real local Slurm cluster.

Brings up its own Slurm lab (scripts/slurm-lab, separate directory and ports), a real Temporal
dev server, and one goodput worker in autonomous mode with the real detectors and the CLI
backend. J opted-in `--requeue` jobs print a progress line every 0.2 s; the benchmark injects
faults through a control file each job polls, N of each kind:

* `crash` — the job prints an NCCL watchdog timeout and exits 1 (log-evident, no drain);
* `die` — the job exits 1 silently: only Slurm's FAILED state tells (scheduler watcher);
* `hang` — the job stops printing progress (hang detector: max(k × step time, floor)).

Per fault: `detection_s` = the incident's first anomaly detected_at - fault time (an upper
bound on observed→detected: it includes the job's own ≤0.2 s reaction), `action_s` = the first
Slurm action (the requeue) done - detected, `resume_s` = fault → the next attempt printing
progress (dominated by Slurm's requeue delay, cred_expire + 1 s = 11 s in the lab).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from activities.adapters.slurm_cli import SlurmCliBackend
from benchmarks._harness import connect, dev_server, emit, environment, summary
from goodput.detect.hang import HangConfig
from goodput.detect.watch import WatchClusterInput
from goodput.models import IncidentKey, Mode
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from workers.watching import start_cluster_watch
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow
from workflows.watch import cluster_watch_id

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "scripts" / "slurm-lab"
KINDS = ("crash", "die", "hang")
SEED_DETECTION_S, SEED_ACTION_S = 69.0, 94.0
NCCL = ("[rank0]:[E1129 06:22:43.551920 41877 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=96022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600083 milliseconds before timing out.")
JOB = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
r=${{SLURM_RESTART_COUNT:-0}}
ctl={dir}/ctl-$SLURM_JOB_ID-$r
step=0
while true; do
  step=$((step + 1))
  echo "attempt $r iteration $step/ 100000 | elapsed time per iteration (ms): 200.0"
  if [ -f "$ctl" ]; then
    case "$(cat "$ctl")" in
      crash) echo '{nccl}'; exit 1 ;;
      die) exit 1 ;;
      hang) exec sleep 100000 ;;
    esac
  fi
  sleep 0.2
done
"""


def ensure_slurm_installed() -> None:
    """The lab needs Debian's Slurm and munge packages; install them as `make test` does."""
    if shutil.which("slurmctld") and shutil.which("sbatch"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("Slurm is not installed: run `sudo bash scripts/slurm-lab/install.sh` first")
    subprocess.run(["bash", str(LAB / "install.sh")], check=True, timeout=900)


@asynccontextmanager
async def slurm_lab(nodes: int) -> AsyncIterator[Path]:
    ensure_slurm_installed()
    lab_dir = Path(tempfile.gettempdir()) / "goodput-bench-slurmlab"
    env = {**os.environ, "SLURMLAB_DIR": str(lab_dir), "SLURMLAB_NODES": str(nodes), "SLURMLAB_CPUS": "4",
           "SLURMLAB_CTL_PORT": "26817", "SLURMLAB_SLURMD_BASEPORT": "26900", "SLURMLAB_REST_PORT": "26820"}
    up = subprocess.run(["bash", str(LAB / "up.sh")], env=env, capture_output=True, text=True, timeout=180)
    if up.returncode not in (0, 3):
        raise RuntimeError(f"slurm lab did not start: {up.stdout}\n{up.stderr}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(lab_dir / "etc" / "slurm.conf")
    try:
        yield lab_dir
    finally:
        subprocess.run(["bash", str(LAB / "down.sh")], env=env, capture_output=True, timeout=180)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


def sbatch(script: Path, workdir: Path) -> str:
    done = subprocess.run(["sbatch", "--parsable", f"--output={workdir}/job-%j.out", f"--chdir={workdir}",
                           str(script)], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip().split(";")[0]


async def wait_for(predicate: Any, timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(poll_s)
    return False


class Run:
    def __init__(self, client: Client, cluster: str, workdir: Path, quota: dict[str, int]) -> None:
        self.client, self.cluster, self.workdir, self.quota = client, cluster, workdir, quota
        self.samples: list[dict[str, Any]] = []
        self.failures: list[str] = []

    def next_kind(self, rng: random.Random) -> str | None:
        open_kinds = [k for k, left in self.quota.items() if left > 0]
        if not open_kinds:
            return None
        kind = rng.choice(open_kinds)
        self.quota[kind] -= 1
        return kind

    async def cycle_job(self, job_id: str, seed: int) -> None:
        rng = random.Random(seed)
        out = self.workdir / f"job-{job_id}.out"
        attempt = 0
        while (kind := self.next_kind(rng)) is not None:
            marker = f"attempt {attempt} iteration 3/"
            if not await wait_for(lambda m=marker: _contains(out, m), 120):
                self.failures.append(f"{job_id}: attempt {attempt} never progressed")
                return
            fault_wall = datetime.now(UTC)
            fault = time.monotonic()
            (self.workdir / f"ctl-{job_id}-{attempt}").write_text(kind)
            resumed = f"attempt {attempt + 1} iteration 2/"
            if not await wait_for(lambda m=resumed: _contains(out, m), 180, poll_s=0.1):
                self.failures.append(f"{job_id}: {kind} at attempt {attempt} never resumed")
                return
            resume_s = time.monotonic() - fault
            report = await self.report(IncidentKey(cluster=self.cluster, job_id=job_id, job_attempt=attempt))
            sample: dict[str, Any] = {"kind": kind, "job": job_id, "attempt": attempt, "resume_s": resume_s,
                                      "incident": IncidentKey(cluster=self.cluster, job_id=job_id,
                                                              job_attempt=attempt).workflow_id}
            if report is not None and report.anomalies:
                detected = min(a.detected_at for a in report.anomalies)
                sample["detection_s"] = (detected - fault_wall).total_seconds()
                acted = [e.at for e in report.timeline if e.state is IncidentState.RESUMING and "requeue" in e.detail
                         and "attempt" not in e.detail]
                if acted:
                    sample["action_s"] = (acted[0] - detected).total_seconds()
            self.samples.append(sample)
            attempt += 1

    async def outcomes(self) -> None:
        """Each incident's final state, once its verification and linger are over."""
        for sample in self.samples:
            handle = self.client.get_workflow_handle_for(RecoveryWorkflow.run, sample["incident"])
            try:
                sample["outcome"] = str((await asyncio.wait_for(handle.result(), timeout=120)).state)
            except (RPCError, TimeoutError) as err:
                sample["outcome"] = f"unknown: {err}"

    async def report(self, key: IncidentKey) -> IncidentReport | None:
        handle = self.client.get_workflow_handle_for(RecoveryWorkflow.run, key.workflow_id)
        for _ in range(100):
            try:
                return await handle.query(RecoveryWorkflow.report)
            except RPCError:
                await asyncio.sleep(0.1)
        return None


async def _contains(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except FileNotFoundError:
        return False


async def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    cluster = f"bench{uuid.uuid4().hex[:4]}"
    policy = Policy(mode=Mode.AUTONOMOUS, coalesce_window_s=args.coalesce, linger_s=10.0,
                    verify_poll_interval_s=0.5, verify_running_timeout_s=120.0, max_resume_attempts=1,
                    breaker=BreakerPolicy(max_drained_nodes=1000))
    quota = dict.fromkeys(KINDS, args.faults)
    with tempfile.TemporaryDirectory(prefix="goodput-latency-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        script = workdir / "train.sbatch"
        script.write_text(JOB.format(dir=workdir, nccl=NCCL))
        async with slurm_lab(args.nodes), dev_server("sqlite-wal") as server:
            client = await connect(server.address)
            queue = f"latency-{uuid.uuid4().hex[:6]}"
            backend = SlurmCliBackend()
            async with build_worker(client, queue, backend, RecordingNotifier(), policy=policy):
                await start_cluster_watch(client, queue, WatchClusterInput(
                    cluster=cluster, poll_interval_s=args.scheduler_poll, log_poll_interval_s=args.log_poll,
                    hang=HangConfig(k=5, floor_s=args.hang_floor, startup_grace_s=60)))
                jobs = [sbatch(script, workdir) for _ in range(args.jobs)]
                await wait_for(lambda: _all_running(backend, jobs), 60, poll_s=0.5)
                run = Run(client, cluster, workdir, quota)
                started = time.monotonic()
                await asyncio.gather(*(run.cycle_job(job, i) for i, job in enumerate(jobs)))
                elapsed = time.monotonic() - started
                await run.outcomes()
                await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("benchmark over")
                subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)
    return summarise(run.samples, run.failures, elapsed, args)


async def _all_running(backend: SlurmCliBackend, jobs: list[str]) -> bool:
    states = [(await backend.get_job(j)).state for j in jobs]
    return all(s is JobState.RUNNING for s in states)


def summarise(samples: list[dict[str, Any]], failures: list[str], elapsed: float,
              args: argparse.Namespace) -> dict[str, Any]:
    def p(values: list[float], q: str) -> float:
        return round(summary(values)[q], 3) if values else float("nan")

    def metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
        det = [r["detection_s"] for r in rows if "detection_s" in r]
        act = [r["action_s"] for r in rows if "action_s" in r]
        res = [r["resume_s"] for r in rows]
        return {"n": len(rows), "detection_p50_s": p(det, "p50"), "detection_p99_s": p(det, "p99"),
                "action_p50_s": p(act, "p50"), "action_p99_s": p(act, "p99"), "resume_p50_s": p(res, "p50"),
                "resume_p99_s": p(res, "p99"),
                "recovered": sum(1 for r in rows if r.get("outcome") == "recovered")}

    result = metrics(samples)
    result["per_kind"] = {k: metrics([r for r in samples if r["kind"] == k]) for k in KINDS}
    result["failures"] = failures
    result["elapsed_s"] = round(elapsed, 1)
    result["seed_detection_ratio"] = round(SEED_DETECTION_S / result["detection_p50_s"], 1)
    result["seed_action_ratio"] = round(SEED_ACTION_S / result["action_p50_s"], 1)
    result["parameters"] = {k: v for k, v in vars(args).items() if k != "json"}
    result["environment"] = environment()
    return result


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks latency", description=__doc__)
    parser.add_argument("--faults", type=int, default=50, help="faults per kind")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--coalesce", type=float, default=0.5)
    parser.add_argument("--scheduler-poll", type=float, default=0.5)
    parser.add_argument("--log-poll", type=float, default=0.1)
    parser.add_argument("--hang-floor", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_latency(args))
    print(f"latency on a local Slurm lab: {result['n']} faults in {result['elapsed_s']} s "
          f"({args.jobs} jobs on {args.nodes} nodes), autonomous mode")
    print(f"  {'kind':<6} {'n':>4} {'detect p50':>11} {'p99':>7} {'action p50':>11} {'p99':>7} "
          f"{'resume p50':>11} {'recovered':>10}")
    for kind, m in [*result["per_kind"].items(), ("all", result)]:
        print(f"  {kind:<6} {m['n']:>4} {m['detection_p50_s']:>9.2f} s {m['detection_p99_s']:>5.2f} s "
              f"{m['action_p50_s']:>9.2f} s {m['action_p99_s']:>5.2f} s {m['resume_p50_s']:>9.2f} s "
              f"{m['recovered']:>10}")
    print(f"  seed anchors: detection 69 s, action 94 s → {result['seed_detection_ratio']}× and "
          f"{result['seed_action_ratio']}× faster at the median")
    if result["failures"]:
        print(f"  failures: {result['failures'][:5]}")
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
