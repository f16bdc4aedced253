"""`watch`: how many running jobs one host can watch, and what it costs in CPU and latency.

For each fleet size N: N job attempts, each with a log file a writer process appends a progress
line to every second; one in-process goodput worker runs the N job log watchers (real Temporal
dev server, real tailers, real catalogue). After a warm-up, the worker process's CPU use is
measured over a window, then Xid lines are written into a sample of the files and the time until
each incident exists is measured. The host keeps up while CPU stays below one core and latency
stays near the poll interval.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from benchmarks._harness import connect, dev_server, emit, environment, summary, worker
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.detect.watch import WatchJobInput
from goodput.models import IncidentKey
from goodput.scheduler import JobInfo, JobState
from workers.watch import TemporalWatchLauncher
from workflows.watch import job_watch_id

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
WRITER = """
import sys, time
paths = sys.argv[1:]
step = 0
while True:
    step += 1
    for p in paths:
        with open(p, "a") as out:
            out.write(f"iteration {step}/ 100000 | elapsed time per iteration (ms): 1000.0\\n")
    time.sleep(1.0)
"""


async def wait_incident(client: Client, key: IncidentKey, timeout_s: float = 30.0) -> float | None:
    handle = client.get_workflow_handle(key.workflow_id)
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            await handle.describe()
            return time.monotonic() - start
        except RPCError:
            await asyncio.sleep(0.02)
    return None


async def level(client: Client, n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = f"cap{n}-{uuid.uuid4().hex[:4]}"
    paths = [tmp / f"{cluster}-{i}.out" for i in range(n)]
    jobs = {}
    for i, path in enumerate(paths):
        path.write_text("")
        jobs[str(200_000 + i)] = JobInfo(job_id=str(200_000 + i), state=JobState.RUNNING, nodes=(f"n{i}",),
                                         stdout_path=str(path), comment="goodput:opt-in")
    fake = FakeScheduler(FakeClusterState(jobs=jobs))
    queue = f"cap-{uuid.uuid4().hex[:6]}"
    # The writer runs beside the event loop for the whole level; it is never awaited.
    writer = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, paths)])
    try:
        async with worker(client, queue, fake):
            launcher = TemporalWatchLauncher(client, queue)
            now = datetime.now(UTC)
            for job in jobs.values():
                await launcher.launch(WatchJobInput(cluster=cluster, job=job, started_at=now,
                                                    poll_interval_s=args.poll, job_check_interval_s=30.0))
            await asyncio.sleep(args.warmup)
            cpu0, wall0 = time.process_time(), time.monotonic()
            await asyncio.sleep(args.window)
            cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0)
            sample = random.Random(n).sample(range(n), min(args.probes, n))
            latencies: list[float] = []
            missed = 0
            for i in sample:
                with paths[i].open("a") as out:
                    out.write(XID + "\n")
                got = await wait_incident(client, IncidentKey(cluster=cluster, job_id=str(200_000 + i), job_attempt=0))
                if got is None:
                    missed += 1
                else:
                    latencies.append(got)
            for job_id in jobs:
                handle = client.get_workflow_handle(job_watch_id(cluster, job_id, 0))
                with contextlib.suppress(RPCError):
                    await handle.terminate("benchmark level over")
    finally:
        writer.kill()
        writer.wait()
    detection = {k: round(v, 4) for k, v in summary(latencies).items()}
    return {"jobs": n, "cpu_cores": round(cpu, 3), "detection_s": detection, "missed": missed}


async def run_levels(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    with tempfile.TemporaryDirectory(prefix="goodput-watch-") as tmp:
        async with dev_server("sqlite-wal") as server:
            client = await connect(server.address)
            for n in args.jobs:
                results.append(await level(client, n, args, Path(tmp)))
    return {"levels": results, "poll_interval_s": args.poll, "environment": environment()}


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks watch", description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[50, 200, 500, 1000])
    parser.add_argument("--poll", type=float, default=0.25, help="log poll interval per watcher (s)")
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--probes", type=int, default=10, help="Xid lines written per level")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_levels(args))
    print(f"job log watchers in one worker process (poll every {args.poll}s, 1 line/s per job)")
    print(f"  {'jobs':>6} {'CPU (cores)':>12} {'detect p50':>11} {'p99':>8} {'missed':>7}")
    for r in result["levels"]:
        d = r["detection_s"]
        print(f"  {r['jobs']:>6} {r['cpu_cores']:>12} {d['p50'] * 1000:>8.0f} ms {d['p99'] * 1000:>5.0f} ms "
              f"{r['missed']:>7}")
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
