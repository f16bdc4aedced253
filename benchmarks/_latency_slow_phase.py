"""The latency benchmark's `slow-phase` class: no fault, phases slow by nature, and no incident allowed.

A 1 s-step job prints a 4-minute start-up (checkpoint load), a 3-minute checkpoint save and a
2-minute evaluation pass as Megatron-LM prints them (`_latency_lab.SLOW_PHASE_JOB`), then exits 0.
Any incident opened for one of them is a false alarm; a job is handled when it ran through every
phase and none opened. Apart from latency.py so that its one class without a fault reads whole.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from benchmarks import _latency_lab as rig
from goodput.models import IncidentKey


class _Bench(Protocol):
    cluster: str
    workdir: Path
    samples: list[dict[str, Any]]
    failures: list[str]

    async def workflow_start(self, workflow_id: str, timeout_s: float) -> datetime | None: ...


async def slow_phase_class(bench: _Bench, node: str, n: int) -> None:
    """n jobs pinned to one node, all running through their slow phases at once; any incident
    opened for one of them is a false alarm."""
    script = bench.workdir / "slow-phase.sbatch"
    script.write_text(rig.SLOW_PHASE_JOB.format(dir=bench.workdir, **rig.SLOW_PHASES))
    p = rig.SLOW_PHASES
    budget = p["startup_s"] + p["save_s"] + p["eval_s"] + 3 * p["steps"] * 1.5 + 180
    samples = []
    for i in range(n):
        name = f"slow-phase-{i}"
        job = rig.sbatch(script, bench.workdir, name, f"--nodelist={node}")
        samples.append({"class": "slow-phase", "name": name, "job": job, "node": None,
                        "fault_at": datetime.now(UTC),  # no fault: when it was submitted
                        "incident": IncidentKey(cluster=bench.cluster, job_id=job, job_attempt=0).workflow_id})
    bench.samples.extend(samples)

    async def finished(sample: dict[str, Any]) -> bool:
        return "slow phases done" in rig.read(bench.workdir / f"{sample['name']}.out") and not rig.job_nodes(
            sample["job"])

    async def watch(sample: dict[str, Any]) -> None:
        done = await rig.wait_for(lambda: finished(sample), budget, poll_s=2)
        # The job has ended: a hang anomaly would have come before; the watcher's last read is quick.
        opened = await bench.workflow_start(sample["incident"], 10)
        sample["false_alarm"] = opened is not None
        sample["handled"] = done and opened is None
        if opened is not None:
            sample["started_at"] = opened
            sample["detection_s"] = (opened - sample["fault_at"]).total_seconds()
            bench.failures.append(f"slow-phase {sample['name']}: an incident opened (a false alarm)")
        elif not done:
            bench.failures.append(f"slow-phase {sample['name']} (job {sample['job']}) did not finish its phases "
                                 f"within {budget:.0f} s")

    await asyncio.gather(*(watch(s) for s in samples))
