"""`storm`: 1,000 anomalies in 10 s across 200 jobs, with one switch failure hitting 30 jobs at once.

Measures what an operator needs to trust goodput under a burst: exactly one incident per job
attempt, no anomaly lost, how long until every incident workflow is running, and whether the
drain breaker stops the switch failure from draining 30 healthy nodes. Real Temporal dev server
(SQLite+WAL, as `goodput up`), real worker, autonomous mode, the fake scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from benchmarks._harness import connect, dev_server, emit, environment, summary, worker
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import IncidentReport
from goodput.recover.policy import Policy
from goodput.recover.trust import AutonomyPolicy
from goodput.scheduler import JobInfo, JobState, NodeInfo
from workers.client import TemporalIncidentService
from workflows.recovery import RecoveryWorkflow


def cluster(jobs: int) -> FakeClusterState:
    nodes = {f"n{i:04d}": NodeInfo(name=f"n{i:04d}", state="ALLOCATED") for i in range(1, 2 * jobs + 101)}
    state = FakeClusterState(nodes=nodes)
    for j in range(jobs):
        state.jobs[str(10_000 + j)] = JobInfo(job_id=str(10_000 + j), state=JobState.RUNNING, partition="gpu",
                                              comment="goodput:opt-in",
                                              nodes=(f"n{2 * j + 1:04d}", f"n{2 * j + 2:04d}"))
    return state


def plan_anomalies(total: int, jobs: int, switch_jobs: int, seconds: float, seed: int) -> list[tuple[float, Anomaly]]:
    """(offset, anomaly) pairs; the switch jobs all report at the same instant mid-storm."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    out: list[tuple[float, Anomaly]] = []

    def make(job: int, kind: AnomalyKind, category: Category | None, node: str | None) -> Anomaly:
        return Anomaly(id=f"s-{uuid.uuid4().hex[:12]}", source=AnomalySource.LOG, kind=kind, cluster="storm",
                       job_id=str(10_000 + job), nodes=(node,) if node else (), category=category,
                       observed_at=now, detected_at=now)

    switch = list(range(switch_jobs))
    per_switch_job = 3
    for job in switch:  # every switch job blames its own first node: the storm the breaker must stop
        out += [(seconds / 2, make(job, AnomalyKind.CRASH, Category.NETWORK, f"n{2 * job + 1:04d}"))
                for _ in range(per_switch_job)]
    others = list(range(switch_jobs, jobs))
    remaining = total - len(out)
    for i in range(remaining):
        # Every job gets at least one anomaly; the rest land on random jobs at random times.
        job = others[i] if i < len(others) else rng.choice(others)
        kind, category = rng.choice([(AnomalyKind.CRASH, None), (AnomalyKind.HANG, Category.HANG),
                                     (AnomalyKind.CRASH, Category.NCCL_TIMEOUT)])
        out.append((rng.uniform(0, seconds), make(job, kind, category, None)))
    return sorted(out, key=lambda pair: pair[0])


async def run_storm(args: argparse.Namespace) -> dict[str, Any]:
    plan = plan_anomalies(args.anomalies, args.jobs, args.switch_jobs, args.seconds, args.seed)
    expected = len({a.incident_key.workflow_id for _, a in plan})
    first_offsets: dict[str, float] = {}
    for offset, a in plan:
        first_offsets.setdefault(a.incident_key.workflow_id, offset)
    policy = Policy(mode=Mode.AUTONOMOUS, coalesce_window_s=1.0, verify_poll_interval_s=0.5,
                    breaker=BreakerPolicy(max_drained_nodes=args.breaker_nodes),
                    # the loop acting, not an operator's approval: every verdict acts, one signal drains
                    autonomy=AutonomyPolicy(earned=False),
                    exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=False))
    fake = FakeScheduler(cluster(args.jobs))
    async with dev_server("sqlite-wal") as server:
        client = await connect(server.address)
        queue = f"storm-{uuid.uuid4().hex[:6]}"
        service = TemporalIncidentService(client, queue)
        async with worker(client, queue, fake):
            started_at: dict[str, float] = {}
            start_latency: list[float] = []
            failures: list[str] = []
            t0 = time.monotonic()

            async def send(offset: float, anomaly: Anomaly) -> None:
                await asyncio.sleep(max(0.0, t0 + offset - time.monotonic()))
                try:
                    sent = time.monotonic()
                    result = await service.inject(anomaly, policy)
                    if result.new_incident:
                        start_latency.append(time.monotonic() - sent)
                    started_at.setdefault(result.incident_id, time.monotonic() - t0)
                except Exception as err:  # a lost anomaly is the measurement, not a crash
                    failures.append(f"{anomaly.id}: {err}")

            await asyncio.gather(*(send(offset, a) for offset, a in plan))
            all_running_s = max(started_at.values()) if started_at else float("nan")
            injected_s = time.monotonic() - t0
            reports: list[IncidentReport] = await asyncio.gather(*(
                client.get_workflow_handle_for(RecoveryWorkflow.run, incident).result()
                for incident in started_at))
    states: dict[str, int] = {}
    for report in reports:
        states[str(report.state)] = states.get(str(report.state), 0) + 1
    folded = sum(r.anomaly_count for r in reports)
    return {
        "anomalies": len(plan), "incidents": len(started_at), "expected": expected,
        "last_first_anomaly_s": round(max(first_offsets.values()), 3),
        "lost": len(plan) - folded, "inject_errors": len(failures),
        "all_running_s": round(all_running_s, 3), "inject_window_s": round(injected_s, 3),
        "start_latency_s": {k: round(v, 4) for k, v in summary(start_latency).items()},
        "drains": len(fake.journal("drain")), "breaker_limit": args.breaker_nodes,
        "escalated_by_breaker": sum(1 for r in reports if r.timeline and "breaker" in r.timeline[-1].detail),
        "outcomes": states, "environment": environment(),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks storm", description=__doc__)
    parser.add_argument("--anomalies", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--switch-jobs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--breaker-nodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    result = asyncio.run(run_storm(args))
    print(f"storm: {result['anomalies']} anomalies in {args.seconds:.0f}s across {args.jobs} jobs "
          f"({args.switch_jobs} hit by one switch failure)")
    rows = [("incidents created / expected", f"{result['incidents']} / {result['expected']}"),
            ("anomalies lost", str(result["lost"])), ("inject errors", str(result["inject_errors"])),
            ("all incident workflows running after", f"{result['all_running_s']:.2f} s (last first-anomaly "
             f"sent at {result['last_first_anomaly_s']:.2f} s)"),
            ("signal-with-start latency p50 / p99",
             f"{result['start_latency_s']['p50'] * 1000:.0f} / {result['start_latency_s']['p99'] * 1000:.0f} ms"),
            ("nodes drained (breaker limit)", f"{result['drains']} ({args.breaker_nodes})"),
            ("incidents escalated by the breaker", str(result["escalated_by_breaker"])),
            ("outcomes", ", ".join(f"{k}={v}" for k, v in sorted(result["outcomes"].items())))]
    for label, value in rows:
        print(f"  {label:<40} {value}")
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
