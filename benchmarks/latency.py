"""`latency`: fault → incident → Slurm's record of the action → running again, with goodput as shipped.

Brings up its own Slurm lab, a real Temporal dev server, one `goodput worker` process and a
`goodput agent` per job node, all on the shipped defaults (see `_latency_lab`); the result says
`"settings": "defaults"` and lists the few settings it had to name. Five fault classes:

* `xid-kernel-log` — an Xid 79 line appended to the job node's kernel log, read by that node's
  agent: drain the node, requeue the job excluding it;
* `crash` — the job prints an NCCL watchdog timeout and exits 1: requeue, nothing drained;
* `hang` — a job with a 1 s step stops printing progress (the hang detector declares it at k x the
  job's p99 interval between progress lines, never below the shipped 45 s floor): requeue;
* `node-failure` — the job node's slurmd is SIGKILLed (Slurm's own NOT_RESPONDING/NODE_FAIL): drain,
  requeue elsewhere;
* `app-error` — a Python traceback and exit 1: the application is at fault, no action;
* `slow-phase` — no fault: a 1 s-step job prints a 4-minute start-up (checkpoint load), a 3-minute
  checkpoint save and a 2-minute evaluation pass as Megatron-LM prints them, then exits 0. It must
  open no incident (a false alarm); handled means it ran through every phase and none opened.
* `node-loss` — the job node's slurmd, the job's slurmstepd and processes and the node's agent are
  SIGKILLed at once, with the lab's SlurmdTimeout at Slurm's default 300 s (chosen by the benchmark
  whenever this class runs): goodput's heartbeats and the job's stopped output find it, drain the
  node and requeue the job off it. Once goodput has drained the node the benchmark brings it back
  (else Slurm holds the job until SlurmdTimeout), so its resume time includes that restore.
  With SlurmdTimeout at 300 s, `node-failure` (slurmd alone killed: the job and agent live on) is
  Slurm's own detection again (its wait grows to SlurmdTimeout + 90 s, and each round takes
  minutes). The three node classes run their rounds in batches, half the drain nodes faulted at
  once (`_latency_nodes`): `--nodes 22` runs 10 rounds at a time, so `--node-rounds 20` is two
  batches whatever SlurmdTimeout is.
* `straggler` — a two-node, four-rank job, one rank's step time 20 % slower from the fault on
  (`_latency_straggler`): handled when its incident names that rank's node within 120 s; as many
  balanced jobs run beside them (`straggler-balanced`), where any incident is a false alarm.

Clocks: detection runs from the injector's timestamp (taken as the fault is written; the job
reacts within its 0.2 s loop) to the incident workflow's start time on the Temporal server; action
from that start to the first action slurmctld logged (a drain with goodput's reason, `Requeuing
JobId`, or the copy's submission); resume from the fault to the next run printing its second step
(the lab's requeue delay, cred_expire + 1 = 11 s, dominates it). All three clocks are this host's
clock; `clock` reports each one's measured offset and bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError

from benchmarks import _latency_lab as rig
from benchmarks._git import commit
from benchmarks._harness import connect, dev_server, emit, environment
from benchmarks._latency_nodes import node_class
from benchmarks._latency_records import CLASSES, clock_gap, first, judge, per_class, resumed_run
from benchmarks._latency_slow_phase import slow_phase_class
from benchmarks._latency_straggler import straggler_class, straggler_cpus
from benchmarks._slurm_lab import Lab, slurmctld_events
from goodput.models import IncidentKey
from goodput.recover.incident import IncidentReport
from workflows.recovery import RecoveryWorkflow
from workflows.watch import cluster_watch_id

# The only settings named: act (the shipped mode only recommends), and a drain breaker that lets
# the drain classes run back to back (shipped: 4 drains per 10 min; it limits how many nodes may be
# drained, not how fast one is); act on every verdict and on one signal (shipped: a rule acts alone
# only once it earned it at the site, and a drain needs two signals, which would measure an
# operator's approval, not the loop).
SETTINGS = {"GOODPUT_POLICY__MODE": "autonomous", "GOODPUT_POLICY__BREAKER__MAX_DRAINED_NODES": "100",
            "GOODPUT_POLICY__AUTONOMY__EARNED": "false", "GOODPUT_POLICY__EXCLUDE_BEFORE_DRAIN__ENABLED": "false"}
HANG_NODE, PINNED_NODE = "node1", "node2"
SLURM_DEFAULT_SLURMD_TIMEOUT_S = 300
T = TypeVar("T")


class Bench:
    def __init__(self, client: Client, cluster: str, lab: Lab, workdir: Path, kernel_logs: dict[str, Path],
                 service: rig.Goodput | None = None, slurmd_timeout_s: int = 20):
        self.client, self.cluster, self.lab, self.workdir = client, cluster, lab, workdir
        self.service = service
        self.slurmd_timeout_s = slurmd_timeout_s
        self.kernel_logs = kernel_logs
        self.script = workdir / "train.sbatch"
        self.script.write_text(rig.JOB.format(dir=workdir, nccl=rig.NCCL))
        self.samples: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.submit_options: tuple[str, ...] = ()  # `--requeue=expedite` with --expedite

    async def running_job(self, name: str, *options: str) -> str | None:
        if name.startswith("hang-"):  # the hang: on a job with a 1 s step
            options = (*options, "--export=ALL,BENCH_STEP_S=1,BENCH_STEP_MS=1000.0")
        job = rig.sbatch(self.script, self.workdir, name, *self.submit_options, *options)
        out = self.workdir / f"{name}.out"
        if not await rig.wait_for(lambda: _ready(out, job), 120, poll_s=0.2):
            self.failures.append(f"{name} (job {job}) never made progress")
            rig.scancel(job)
            return None
        return job

    async def fault(self, kind: str, name: str, job: str, node: str | None = None) -> dict[str, Any]:
        """Injects one fault into a running job; the sample is filled in as the recovery goes on."""
        sample: dict[str, Any] = {"class": kind, "name": name, "job": job, "node": node,
                                  "incident": IncidentKey(cluster=self.cluster, job_id=job, job_attempt=0).workflow_id}
        if kind == "xid-kernel-log":
            assert node is not None
            stamp = datetime.now(UTC)
            with self.kernel_logs[node].open("a") as log:
                log.write(rig.XID_79.format(stamp=stamp.isoformat(timespec="seconds"), node=node) + "\n")
        elif kind == "node-failure":
            assert node is not None
            stamp = datetime.now(UTC)
            self.lab.kill_slurmd(node)
        elif kind == "node-loss":
            assert node is not None and self.service is not None
            doomed = rig.job_processes(self.lab, job)
            stamp = datetime.now(UTC)
            self.lab.kill_slurmd(node)
            for pid in doomed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.service.kill_agent(node)
            sample["killed"] = len(doomed)
        else:
            stamp = datetime.now(UTC)
            (self.workdir / f"ctl-{job}-0").write_text(kind)
        sample["fault_at"] = stamp
        self.samples.append(sample)
        return sample

    async def follow(self, sample: dict[str, Any], detect_timeout_s: float) -> None:
        """Waits for the incident to start and, unless the class takes no action, for the job to run again."""
        started = await self.workflow_start(sample["incident"], detect_timeout_s)
        if started is None:
            self.failures.append(f"{sample['class']} {sample['name']}: no incident within {detect_timeout_s:.0f} s")
            return
        sample["started_at"] = started
        sample["detection_s"] = (started - sample["fault_at"]).total_seconds()
        if sample["class"] == "app-error":
            return
        out = self.workdir / f"{sample['name']}.out"
        resumed: list[tuple[str, int]] = []

        async def running_again() -> bool:
            run = resumed_run(rig.read(out), (sample["job"], 0))
            if run:
                resumed.append(run)
            return run is not None

        # Slurm starts a node-failure job's next run only once it marked the node DOWN (SlurmdTimeout
        # after the fault, up to a ping interval late) and its scheduler came round to it.
        bound = 300 + (self.slurmd_timeout_s if sample["class"] == "node-failure" else 0)
        if await rig.wait_for(running_again, bound, poll_s=0.1):
            sample["resume_s"] = (datetime.now(UTC) - sample["fault_at"]).total_seconds()
            sample["resumed_as"] = list(resumed[0])
        else:
            self.failures.append(f"{sample['class']} {sample['name']}: not running again within {bound} s")

    async def workflow_start(self, workflow_id: str, timeout_s: float) -> datetime | None:
        handle = self.client.get_workflow_handle(workflow_id)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                return (await handle.describe()).start_time
            except RPCError:
                await asyncio.sleep(0.2)
        return None

    async def pinned_class(self, kind: str, node: str, n: int, detect_timeout_s: float) -> None:
        """n jobs pinned to one node, all faulted at once (half a second apart)."""
        names = [f"{kind}-{i}" for i in range(n)]
        jobs = await asyncio.gather(*(self.running_job(name, f"--nodelist={node}") for name in names))
        samples = []
        for name, job in zip(names, jobs, strict=True):
            if job is not None:
                samples.append(await self.fault(kind, name, job))
                await asyncio.sleep(0.5)
        await asyncio.gather(*(self.follow(s, detect_timeout_s) for s in samples))

    async def outcome(self, sample: dict[str, Any]) -> None:
        """The incident's final report, once its verification and linger are over."""
        if "started_at" not in sample or "outcome" in sample:
            return
        handle = self.client.get_workflow_handle_for(RecoveryWorkflow.run, sample["incident"])
        try:
            report: IncidentReport = await asyncio.wait_for(handle.result(), timeout=1200)
            sample["outcome"] = str(report.state)
            sample["category"] = str(report.attribution.category) if report.attribution else None
        except (RPCError, TimeoutError) as err:
            sample["outcome"] = f"unknown: {type(err).__name__}"

    async def outcomes(self) -> None:
        await asyncio.gather(*(self.outcome(s) for s in self.samples))

    async def clocks(self) -> dict[str, Any]:
        """The offsets of Temporal's and slurmctld's timestamps from the injector's clock."""
        temporal, slurm = [], []
        for _ in range(5):
            sent = time.time()
            handle = await self.client.start_workflow("clock-probe", id=f"clock-{uuid.uuid4().hex[:8]}",
                                                      task_queue=f"clock-probe-{uuid.uuid4().hex[:6]}")
            answered = time.time()
            described = await handle.describe()
            temporal.append((sent, described.start_time.timestamp(), answered))
            await handle.terminate("clock probe")
        start = self.lab.slurmctld_log.stat().st_size
        for i in range(5):
            sent = time.time()
            job = rig.sbatch(self.script, self.workdir, f"clock-{i}", "--hold")
            answered = time.time()
            rig.scancel(job)
            submitted = first(slurmctld_events(_tail(self.lab.slurmctld_log, start)), "submit", job)
            if submitted is not None:
                slurm.append((sent, submitted.at.timestamp(), answered))
        return {"temporal": clock_gap(temporal), "slurmctld": clock_gap(slurm),
                "note": "one host, one clock: the gaps are each recorder's latency and resolution, bounded "
                        "by half the probe's round trip (sbatch's includes its process start-up)"}


def _tail(path: Path, start: int) -> str:
    with path.open("rb") as raw:
        raw.seek(start)
        return raw.read().decode("utf-8", "replace")


async def _ready(out: Path, job: str) -> bool:
    # Two scheduler scans (2 s apart by default) into its run, as any job that has run for a while.
    return f"run {job}-0 iteration 25/" in rig.read(out)


async def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    measured = commit()  # now: goodput's processes start from this tree, whatever it is by the end
    cluster = f"lat{uuid.uuid4().hex[:4]}"
    wanted = set(args.classes.split(","))
    slurmd_timeout = args.slurmd_timeout or (SLURM_DEFAULT_SLURMD_TIMEOUT_S if "node-loss" in wanted else 20)
    cpus = max(8, 2 * args.n + 2, straggler_cpus(args.n) if "straggler" in wanted else 0)
    with tempfile.TemporaryDirectory(prefix="goodput-latency-") as tmp:
        async with rig.slurm_lab(args.nodes, cpus=cpus, slurmd_timeout_s=slurmd_timeout, slurm=args.slurm) as lab, \
                dev_server("sqlite-wal") as server:
            workdir = rig.job_workdir(lab, args.keep or Path(tmp))
            slurm_version = rig.slurm_version()
            if args.expedite:
                rig.enable_expedited_requeue(lab)
            drain_nodes = [f"node{i}" for i in range(3, args.nodes + 1)]
            kernel_logs = {node: workdir / f"kern-{node}.log" for node in drain_nodes}
            for node, path in kernel_logs.items():
                path.write_text(f"{datetime.now(UTC).isoformat(timespec='seconds')} {node} kernel: booted\n")
            settings, agent_env = dict(SETTINGS), dict[str, dict[str, str]]()
            if "node-loss" in wanted:
                named, agent_env = rig.liveness(workdir, cluster, drain_nodes)
                settings.update(named)
            client = await connect(server.address)
            queue = f"latency-{uuid.uuid4().hex[:6]}"
            log_start = lab.slurmctld_log.stat().st_size
            with rig.goodput_as_shipped(server.address, cluster, queue, lab, workdir, settings,
                                        kernel_logs, agent_env) as service:
                bench = Bench(client, cluster, lab, workdir, kernel_logs, service, slurmd_timeout)
                bench.submit_options = ("--requeue=expedite",) if args.expedite else ()
                if not await bench.workflow_start(cluster_watch_id(cluster), 60):
                    raise RuntimeError(f"goodput worker did not start: {rig.read(workdir / 'worker.log')[-2000:]}")
                clock = await bench.clocks()
                started = time.monotonic()
                hang = asyncio.create_task(bench.pinned_class("hang", HANG_NODE, args.n, 900)
                                           if "hang" in wanted else asyncio.sleep(0))
                slow = asyncio.create_task(slow_phase_class(bench, HANG_NODE, args.n)
                                           if "slow-phase" in wanted else asyncio.sleep(0))
                for kind in ("crash", "app-error"):
                    if kind in wanted:
                        await bench.pinned_class(kind, PINNED_NODE, args.n, 120)
                for kind in ("xid-kernel-log", "node-failure", "node-loss"):
                    if kind in wanted:
                        await node_class(bench, kind, args.node_rounds, [HANG_NODE, PINNED_NODE], len(drain_nodes))
                if "straggler" in wanted:
                    await straggler_class(bench, args.n, [HANG_NODE, PINNED_NODE])
                await hang
                await slow
                await bench.outcomes()
                elapsed = time.monotonic() - started
                if args.keep:
                    await _save_histories(client, workdir / "histories")
                if not service.alive():
                    bench.failures.append("a goodput process exited during the run")
                rig.scancel(*[s["job"] for s in bench.samples],
                            *[s["resumed_as"][0] for s in bench.samples if s.get("resumed_as")])
            judge(bench.samples, slurmctld_events(_tail(lab.slurmctld_log, log_start)))
            overrides = {k: v for k, v in service.overrides.items()
                         if (k in settings and "SECRET" not in k and not k.endswith("PORT") and "URL" not in k)
                         or k == "GOODPUT_SCHEDULER"}
            if args.keep and workdir != args.keep:  # a root's lab: its directory is wiped by the next up.sh
                shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
    return {
        "slurm": args.slurm, "slurm_version": slurm_version, "settings": "defaults", "overrides": overrides,
        "commit": measured, "classes": per_class(bench.samples),
        "clock": clock, "failures": bench.failures, "elapsed_s": round(elapsed, 1),
        "parameters": {"classes": args.classes, "n": args.n, "node_rounds": args.node_rounds, "nodes": args.nodes,
                       "lab": {"cred_expire_s": 10, "slurmd_timeout_s": slurmd_timeout, "slurm": args.slurm,
                               "expedited_requeue": args.expedite}},
        "samples": [_public(s) for s in bench.samples], "environment": environment(),
    }


async def until_signalled(run: Coroutine[Any, Any, T]) -> T:
    """`run`, cancelled by the first SIGTERM or SIGINT, so that its context managers take the lab, the
    agents and goodput's processes down (killed outright, they stayed up); later signals wait for that."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(run)
    signalled: list[int] = []

    def stop(signum: int) -> None:
        if not signalled and not task.done():
            signalled.append(signum)
            task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await task
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def _save_histories(client: Client, into: Path) -> None:
    """Every workflow's history, for reading a surprising result afterwards (`--keep` only)."""
    into.mkdir(exist_ok=True)
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        (into / (re.sub(r"[^A-Za-z0-9._-]", "_", execution.id) + ".json")).write_text(history.to_json())


def _public(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v.isoformat() if isinstance(v, datetime) else v)
            for k, v in sample.items()}


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5, help="faults per class for crash, hang, app-error and "
                        "straggler, and slow-phase jobs")
    parser.add_argument("--node-rounds", type=int, default=5,
                        help="faults per class for xid-kernel-log, node-failure and node-loss, (nodes - 2) // 2 at "
                             "a time")
    parser.add_argument("--nodes", type=int, default=5, help="lab nodes (node1: hang and slow-phase jobs, node2: "
                        "crash and app-error jobs, the rest: xid, node-failure and node-loss jobs, half of them "
                        "faulted at once, e.g. --nodes 22 for 10 at once)")
    parser.add_argument("--classes", default=",".join(c for c in CLASSES if c != "straggler-balanced"),
                        help="a comma-separated subset, for trying it out")
    parser.add_argument("--slurmd-timeout", type=int, help="the lab's SlurmdTimeout in seconds (default: Slurm's "
                        "300 when node-loss runs, else the lab's 20)")
    parser.add_argument("--slurm", choices=("22.05", "24.11", "26.05"), default="22.05",
                        help="the lab's Slurm: the host's 22.05, or a Debian root's (scripts/slurm-lab/root.sh, "
                             "under $SLURMLAB_ROOTS), reached through shims on PATH")
    parser.add_argument("--expedite", action="store_true", help="26.05 only: the site enables expedited requeue "
                        "(SlurmctldParameters=enable_expedited_requeue) and the jobs ask for it (--requeue=expedite)")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs of goodput and jobs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.expedite and args.slurm != "26.05":
        parser.error("--expedite needs --slurm 26.05 (expedited requeue is new in Slurm 25.11)")
    if args.nodes < 4:
        parser.error("--nodes must be at least 4: two pinned nodes and two for the drain classes")
    try:
        result = asyncio.run(until_signalled(run_latency(args)))
    except asyncio.CancelledError:
        raise SystemExit("latency: interrupted; its lab, agents and goodput processes are down") from None
    expedited = ", expedited requeue" if result["parameters"]["lab"]["expedited_requeue"] else ""
    print(f"latency on Slurm {result['slurm_version']} (--slurm {result['slurm']}{expedited}) with goodput as shipped "
          f"(settings: defaults, plus {result['overrides']}), commit "
          f"{result['commit']}; {result['elapsed_s']} s")
    print(f"  {'class':<15} {'n':>3} {'handled':>8} {'detect p50':>11} {'p99':>8} {'action p50':>11} {'p99':>8} "
          f"{'resume p50':>11}")
    for name in CLASSES:
        m = result["classes"][name]
        print(f"  {name:<15} {m['n']:>3} {m['handled']:>8} {_s(m['detection_p50_s']):>11} "
              f"{_s(m['detection_p99_s']):>8} {_s(m['action_p50_s']):>11} {_s(m['action_p99_s']):>8} "
              f"{_s(m['resume_p50_s']):>11}" + (f"  (+{m['lab_failed']} the lab never ran)" if m["lab_failed"] else ""))
    gaps = result["clock"]
    print(f"  clocks: Temporal {gaps['temporal']}, slurmctld {gaps['slurmctld']}")
    if result["failures"]:
        print(f"  failures: {result['failures'][:5]}")
    emit(result, args.json)
    return result


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


if __name__ == "__main__":
    run()
