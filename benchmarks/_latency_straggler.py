"""The latency benchmark's `straggler` class: one rank of a multi-rank job slowed from a point in time.

A synchronous job's ranks all step at the pace of the slowest, so the job's own step time says
little; what a straggler shows is in each rank's time for its own share (Megatron-LM's per-rank
timers, NVRx's section times). The lab job here is two nodes with two ranks each, every rank
printing its step time each second as the detector reads it (`node3: [rank3]: iteration …
elapsed time per iteration (ms): …`, ±2 % jitter so the fleet is not perfectly uniform); when the
benchmark writes `slow <rank>` to the job's control file that rank's time grows by `SLOWDOWN`.
Detection runs from that write to the start of the job's incident, and a sample is handled when
the incident's straggler anomaly names the node the slowed rank runs on. Balanced jobs, the same
job never slowed, run beside them for as long; any incident on one of them is a false alarm.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from temporalio.client import Client
from temporalio.service import RPCError

from benchmarks import _latency_lab as rig
from goodput.detect.straggler import DEFAULT_STRAGGLER_CONFIG
from goodput.models import AnomalyKind, IncidentKey
from goodput.recover.incident import IncidentReport
from workflows.recovery import RecoveryWorkflow

SLOWDOWN = 0.20       # the slowed rank's step time: 20 % above the others'
STEP_MS = 1000.0
RANKS, NODES = 4, 2
WITHIN_S = 120.0      # the target: named within 120 s of the slowdown
WATCH_S = 300.0       # how long the benchmark waits for an incident before calling it missed
WARM_STEPS = DEFAULT_STRAGGLER_CONFIG.window + 5  # the detector's window of step times, full

STRAGGLER_JOB = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={per_node}
#SBATCH --cpus-per-task=1
export BENCH_CTL={dir}/ctl-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}
srun --kill-on-bad-exit=0 bash -c '
step=0; slow=0
while true; do
  step=$((step + 1))
  if [ "$slow" = 0 ] && [ -f "$BENCH_CTL" ] && [ "$(cat "$BENCH_CTL")" = "slow $SLURM_PROCID" ]; then slow=1; fi
  jitter=$((RANDOM % 41 - 20))
  ms=$(( {step_ms} * (1000 + jitter) * (1000 + slow * {slow_permille}) / 1000000 ))
  echo "$SLURMD_NODENAME: [rank$SLURM_PROCID]: iteration $step/ 100000 | elapsed time per iteration (ms): $ms.0"
  sleep {step_s}
done'
"""


class _Bench(Protocol):
    client: Client
    cluster: str
    workdir: Path
    samples: list[dict[str, Any]]
    failures: list[str]

    async def workflow_start(self, workflow_id: str, timeout_s: float) -> datetime | None: ...


def straggler_cpus(n: int) -> int:
    """CPUs per lab node for 2n two-node jobs: Slurm packs them onto the first two free nodes, so
    those two must hold every job's share."""
    return 2 * n * (RANKS // NODES) + RANKS


def script_text(workdir: Path) -> str:
    return STRAGGLER_JOB.format(dir=workdir, nodes=NODES, per_node=RANKS // NODES, step_ms=int(STEP_MS),
                                slow_permille=round(SLOWDOWN * 1000), step_s=STEP_MS / 1000)


def rank_nodes(output: str) -> dict[int, str]:
    """Where each rank runs, from the job's own lines (`node3: [rank3]: iteration …`)."""
    where: dict[int, str] = {}
    for line in output.splitlines():
        host, sep, rest = line.partition(": [rank")
        if sep and rest[:1].isdigit():
            rank = rest.split("]", 1)[0]
            if rank.isdigit():
                where.setdefault(int(rank), host)
    return where


def named_nodes(report: IncidentReport) -> tuple[str, ...]:
    """The nodes the incident's straggler anomalies name."""
    return tuple(dict.fromkeys(n for a in report.anomalies if a.kind is AnomalyKind.STRAGGLER for n in a.nodes))


def judge(sample: dict[str, Any]) -> None:
    """Handled: the incident named the slowed rank's node, and only it, within the target."""
    named = sample.get("named") or []
    sample["handled"] = (sample.get("detection_s") is not None and named == [sample.get("node")]
                         and sample["detection_s"] <= WITHIN_S)


async def _report(client: Client, incident: str) -> IncidentReport | None:
    handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
    try:
        return await handle.query(RecoveryWorkflow.report)
    except RPCError:
        return None


async def _running(bench: _Bench, name: str, job: str) -> dict[int, str] | None:
    """Each rank's node once every rank has printed `WARM_STEPS`: a job that has run a while, whose
    ranks' step-time windows are full, so the slowdown has a whole window of healthy steps to outvote."""
    out = bench.workdir / f"{name}.out"
    ranks: dict[int, str] = {}

    async def ready() -> bool:
        text = rig.read(out)
        ranks.update(rank_nodes(text))
        return len(ranks) == RANKS and all(f"[rank{r}]: iteration {WARM_STEPS}/" in text for r in range(RANKS))

    if not await rig.wait_for(ready, 180 + WARM_STEPS * STEP_MS / 1000, poll_s=0.5):
        bench.failures.append(f"{name} (job {job}) never made progress on all {RANKS} ranks")
        rig.scancel(job)
        return None
    return ranks


async def straggler_class(bench: _Bench, n: int, avoid: list[str]) -> None:
    """n jobs with one rank slowed, all at once, and n balanced jobs beside them."""
    script = bench.workdir / "straggler.sbatch"
    script.write_text(script_text(bench.workdir))
    names = [f"straggler-{i}" for i in range(n)] + [f"balanced-{i}" for i in range(n)]
    jobs = [rig.sbatch(script, bench.workdir, name, f"--exclude={','.join(avoid)}") for name in names]
    placed = await asyncio.gather(*(_running(bench, name, job) for name, job in zip(names, jobs, strict=True)))
    samples: list[dict[str, Any]] = []
    for i, (name, job, ranks) in enumerate(zip(names, jobs, placed, strict=True)):
        if ranks is None:
            continue
        rank = i % RANKS
        incident = IncidentKey(cluster=bench.cluster, job_id=job, job_attempt=0).workflow_id
        if name.startswith("balanced-"):
            samples.append({"class": "straggler-balanced", "name": name, "job": job, "node": None,
                            "fault_at": datetime.now(UTC), "incident": incident})
            continue
        stamp = datetime.now(UTC)
        (bench.workdir / f"ctl-{job}-0").write_text(f"slow {rank}")
        samples.append({"class": "straggler", "name": name, "job": job, "node": ranks[rank], "rank": rank,
                        "slowdown": SLOWDOWN, "fault_at": stamp, "incident": incident})
    bench.samples.extend(samples)

    async def follow(sample: dict[str, Any]) -> None:
        started = await bench.workflow_start(sample["incident"], WATCH_S)
        if started is None:
            bench.failures.append(f"straggler {sample['name']}: no incident within {WATCH_S:.0f} s")
            return
        sample["started_at"] = started
        sample["detection_s"] = (started - sample["fault_at"]).total_seconds()
        reports: list[IncidentReport] = []

        async def holds_anomaly() -> bool:  # the first workflow task may not have run yet
            report = await _report(bench.client, sample["incident"])
            reports[:] = [report] if report else []
            return bool(report and report.anomalies)

        await rig.wait_for(holds_anomaly, 30, poll_s=0.5)
        report = reports[0] if reports else None
        sample["named"] = list(named_nodes(report)) if report else []
        sample["outcome"] = str(report.state) if report else "unknown: no report"  # not awaited: the class
        # measures naming, and the job is cancelled once every sample is named
        judge(sample)

    await asyncio.gather(*(follow(s) for s in samples if s["class"] == "straggler"))
    # The balanced jobs run beside the slowed ones for at least the target's span after the last
    # slowdown, then one more look at each, and count.
    balanced = [s for s in samples if s["class"] == "straggler-balanced"]
    faulted = [s["fault_at"] for s in samples if s["class"] == "straggler"]
    if faulted:
        await asyncio.sleep(max(0.0, WITHIN_S - (datetime.now(UTC) - max(faulted)).total_seconds()))
    opened = await asyncio.gather(*(bench.workflow_start(s["incident"], 1) for s in balanced))
    for sample, at in zip(balanced, opened, strict=True):
        sample["false_alarm"] = at is not None
        sample["handled"] = at is None
        if at is not None:
            sample["started_at"] = at
    false_alarms = [s["name"] for s in balanced if s["false_alarm"]]
    if false_alarms:
        bench.failures.append(f"straggler: incidents on balanced jobs {false_alarms}")
    rig.scancel(*jobs)
