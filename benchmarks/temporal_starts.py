"""`temporal`: RecoveryWorkflow starts/s and start→first-activity latency per dev-server storage.

The embedded default is SQLite with WAL; this shows what that choice costs against in-memory
(no durability) and plain SQLite. Each storage gets a fresh dev server with goodput's latency
settings, one worker, and N incidents started by signal-with-start at a fixed concurrency, in
monitor mode (attribute → plan → recommend). The first activity is `attribute`, which reads the
job from the fake scheduler: the time of that read, per incident, is "first activity".
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from benchmarks._harness import connect, dev_server, emit, environment, summary, worker
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Mode
from goodput.recover.policy import Policy
from goodput.scheduler import JobInfo, JobState
from workers.client import TemporalIncidentService
from workflows.recovery import RecoveryWorkflow

STORAGES = ("memory", "sqlite", "sqlite-wal")


class StampingScheduler(FakeScheduler):
    """Records when each job is first read, i.e. when the incident's first activity ran."""

    def __init__(self, state: FakeClusterState) -> None:
        super().__init__(state)
        self.first_read: dict[str, float] = {}

    async def get_job(self, job_id: str) -> JobInfo:
        self.first_read.setdefault(job_id, time.monotonic())
        return await super().get_job(job_id)


def jobs(n: int) -> FakeClusterState:
    return FakeClusterState(jobs={str(100_000 + i): JobInfo(job_id=str(100_000 + i), state=JobState.RUNNING,
                                                            comment="goodput:opt-in")
                                  for i in range(n)})


async def measure(storage: str, count: int, concurrency: int) -> dict[str, Any]:
    fake = StampingScheduler(jobs(count))
    policy = Policy(mode=Mode.MONITOR, coalesce_window_s=0.0, linger_s=0.0)
    now = datetime.now(UTC)
    async with dev_server(storage) as server:
        client = await connect(server.address)
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        service = TemporalIncidentService(client, queue)
        async with worker(client, queue, fake):
            sent: dict[str, float] = {}
            gate = asyncio.Semaphore(concurrency)

            async def start(i: int) -> str:
                job = str(100_000 + i)
                anomaly = Anomaly(id=f"b-{i}", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, cluster="bench",
                                  job_id=job, observed_at=now, detected_at=now)
                async with gate:
                    sent[job] = time.monotonic()
                    return (await service.inject(anomaly, policy)).incident_id

            t0 = time.monotonic()
            ids = await asyncio.gather(*(start(i) for i in range(count)))
            started_s = time.monotonic() - t0
            await asyncio.gather(*(client.get_workflow_handle_for(RecoveryWorkflow.run, i).result() for i in ids))
            completed_s = time.monotonic() - t0
    latencies = [fake.first_read[job] - sent[job] for job in sent if job in fake.first_read]
    return {"storage": storage, "workflows": count, "starts_per_s": round(count / started_s, 1),
            "completed_per_s": round(count / completed_s, 1),
            "first_activity_s": {k: round(v, 4) for k, v in summary(latencies).items()}}


async def run_all(storages: Sequence[str], count: int, concurrency: int, isolated: int) -> dict[str, Any]:
    """A burst (queueing included) and one-at-a-time starts (the latency floor) per storage."""
    burst = [await measure(s, count, concurrency) for s in storages]
    alone = [await measure(s, isolated, 1) for s in storages]
    return {"results": burst, "isolated": alone, "concurrency": concurrency, "environment": environment()}


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks temporal", description=__doc__)
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--isolated", type=int, default=30, help="incidents started one at a time")
    parser.add_argument("--storage", choices=STORAGES, action="append")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_all(args.storage or list(STORAGES), args.workflows, args.concurrency, args.isolated))
    for title, rows in ((f"burst: {args.workflows} incidents, {args.concurrency} starts in flight, one worker",
                         result["results"]),
                        (f"isolated: {args.isolated} incidents started one at a time", result["isolated"])):
        print(f"RecoveryWorkflow on the embedded dev server, {title}")
        print(f"  {'storage':<12} {'starts/s':>9} {'done/s':>8} {'first activity p50':>19} {'p99':>8}")
        for r in rows:
            fa = r["first_activity_s"]
            print(f"  {r['storage']:<12} {r['starts_per_s']:>9} {r['completed_per_s']:>8} "
                  f"{fa['p50'] * 1000:>16.0f} ms {fa['p99'] * 1000:>5.0f} ms")
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
