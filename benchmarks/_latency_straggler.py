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

The class waits for its nodes to be idle and answering before it starts (in the combined run it
started on a node restored from `node-loss` 40 s before), and submits its jobs in waves of
`WAVE`, each once the last has every rank printing, so that 40 four-rank jobs do not all start at
once on a loaded machine. A job that never has every rank printing is the lab failing, not goodput:
it is reported as `lab_failed`, out of the class's n. An incident that opens before the slowdown
keeps what opened it (`opened_by`: each anomaly's kind, category and first line of evidence), so a
result says whether it was a straggler called early, a hang, or something else.
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
WAVE = 10             # jobs submitted at once; the next wave once these print on every rank
IDLE_WAIT_S = 180.0   # for the class's nodes to be idle and answering before it starts

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


def opened_by(report: IncidentReport | None) -> list[str]:
    """What an incident holds, as `kind/category: first evidence line` per anomaly."""
    if report is None:
        return []
    return [f"{a.kind}/{a.category}: {(a.evidence or [''])[0][:200]}" for a in report.anomalies]


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


async def _running(bench: _Bench, name: str, job: str, steps: int, timeout_s: float) -> dict[int, str] | str:
    """Each rank's node once every rank has printed `steps` (`WARM_STEPS`: a job that has run a while,
    whose ranks' step-time windows are full, so the slowdown has a whole window of healthy steps to
    outvote); else why not, in the lab's words."""
    out = bench.workdir / f"{name}.out"
    ranks: dict[int, str] = {}

    async def ready() -> bool:
        text = rig.read(out)
        ranks.update(rank_nodes(text))
        return len(ranks) == RANKS and all(f"[rank{r}]: iteration {steps}/" in text for r in range(RANKS))

    if await rig.wait_for(ready, timeout_s, poll_s=0.5):
        return ranks
    return (f"lab: {name} (job {job}) had {len(ranks)} of {RANKS} ranks printing (ranks {sorted(ranks)}) "
            f"{timeout_s:.0f} s after its wave started: the lab did not run it, goodput is not judged on it")


async def _lab_idle(bench: _Bench, avoid: list[str]) -> None:
    """The class's nodes idle and answering (no other class's job, none drained or down)."""
    def states() -> dict[str, str]:
        return {n: s for n, s in rig.node_states().items() if n not in avoid}

    async def idle() -> bool:
        return all(s == "idle" for s in states().values())

    if not await rig.wait_for(idle, IDLE_WAIT_S, poll_s=2):
        bench.failures.append(f"lab: straggler nodes not idle after {IDLE_WAIT_S:.0f} s ({states()}); started anyway")


async def _submit(bench: _Bench, script: Path, names: list[str], avoid: list[str]) -> list[str]:
    """In waves of `WAVE`, each once the last has every rank printing (or a minute has passed)."""
    jobs: list[str] = []
    for first in range(0, len(names), WAVE):
        wave = [(name, rig.sbatch(script, bench.workdir, name, f"--exclude={','.join(avoid)}"))
                for name in names[first:first + WAVE]]
        jobs.extend(job for _, job in wave)
        if first + WAVE < len(names):
            await asyncio.gather(*(_running(bench, name, job, 1, 60) for name, job in wave))
    return jobs


async def straggler_class(bench: _Bench, n: int, avoid: list[str]) -> None:
    """n jobs with one rank slowed, all at once, and n balanced jobs beside them."""
    script = bench.workdir / "straggler.sbatch"
    script.write_text(script_text(bench.workdir))
    # Interleaved, so that each wave holds slowed and balanced jobs alike.
    names = [f"{kind}-{i}" for i in range(n) for kind in ("straggler", "balanced")]
    await _lab_idle(bench, avoid)
    jobs = await _submit(bench, script, names, avoid)
    placed = await asyncio.gather(*(_running(bench, name, job, WARM_STEPS, 180 + WARM_STEPS * STEP_MS / 1000)
                                    for name, job in zip(names, jobs, strict=True)))
    samples: list[dict[str, Any]] = []
    for name, job, ranks in zip(names, jobs, placed, strict=True):
        incident = IncidentKey(cluster=bench.cluster, job_id=job, job_attempt=0).workflow_id
        kind = "straggler" if name.startswith("straggler-") else "straggler-balanced"
        if isinstance(ranks, str):
            bench.failures.append(ranks)
            rig.scancel(job)
            samples.append({"class": kind, "name": name, "job": job, "node": None, "incident": incident,
                            "lab_failed": ranks})
            continue
        rank = int(name.rsplit("-", 1)[1]) % RANKS
        if name.startswith("balanced-"):
            samples.append({"class": "straggler-balanced", "name": name, "job": job, "node": None,
                            "fault_at": datetime.now(UTC), "incident": incident})
            continue
        stamp = datetime.now(UTC)
        (bench.workdir / f"ctl-{job}-0").write_text(f"slow {rank}")
        samples.append({"class": "straggler", "name": name, "job": job, "node": ranks[rank], "rank": rank,
                        "slowdown": SLOWDOWN, "fault_at": stamp, "incident": incident})
    bench.samples.extend(samples)

    judged = [s for s in samples if not s.get("lab_failed")]

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
        if started < sample["fault_at"]:
            sample["opened_by"] = opened_by(report)
        sample["outcome"] = str(report.state) if report else "unknown: no report"  # not awaited: the class
        # measures naming, and the job is cancelled once every sample is named
        judge(sample)

    await asyncio.gather(*(follow(s) for s in judged if s["class"] == "straggler"))
    # The balanced jobs run beside the slowed ones for at least the target's span after the last
    # slowdown, then one more look at each, and count.
    balanced = [s for s in judged if s["class"] == "straggler-balanced"]
    faulted = [s["fault_at"] for s in judged if s["class"] == "straggler"]
    if faulted:
        await asyncio.sleep(max(0.0, WITHIN_S - (datetime.now(UTC) - max(faulted)).total_seconds()))
    opened = await asyncio.gather(*(bench.workflow_start(s["incident"], 1) for s in balanced))
    for sample, at in zip(balanced, opened, strict=True):
        sample["false_alarm"] = at is not None
        sample["handled"] = at is None
        if at is not None:
            sample["started_at"] = at
            sample["opened_by"] = opened_by(await _report(bench.client, sample["incident"]))
    false_alarms = [s["name"] for s in balanced if s["false_alarm"]]
    if false_alarms:
        bench.failures.append(f"straggler: incidents on balanced jobs {false_alarms}")
    rig.scancel(*jobs)
