"""The latency benchmark's node classes (`xid-kernel-log`, `node-failure`, `node-loss`), several nodes at once.

Each round's fault takes its job's node out; the benchmark puts the node back (slurmd restarted,
node resumed) once the job runs elsewhere. Rounds used to run one at a time, which put n = 20 out
of reach: with Slurm's default SlurmdTimeout of 300 s a `node-failure` round takes minutes. They
now run in batches of half the drain nodes: every job of a batch is `--exclusive`, so Slurm places
each on a node of its own and its requeued run can only go to a node that is idle, never to another
node faulted in the same batch (every one of those still holds its own job, or is drained or down).
The other half of the drain nodes is where the requeued runs go. A batch is over, its jobs and
their new runs cancelled and its nodes restored, before the next starts, so that no job of one
round shares a node with the next round's fault. A node-failure node is restored as a rebooted
node returns: the old run's processes, which outlived its slurmd, are gone first; and slurmctld is
reconfigured after each batch (Slurm 22.05 otherwise kept the next batch's requeued jobs pending
for minutes on idle nodes that fit them, #33).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from benchmarks import _latency_lab as rig
from benchmarks._slurm_lab import Lab


class _Bench(Protocol):
    lab: Lab
    workdir: Path
    failures: list[str]
    service: rig.Goodput | None
    slurmd_timeout_s: int

    async def running_job(self, name: str, *options: str) -> str | None: ...

    async def fault(self, kind: str, name: str, job: str, node: str | None = None) -> dict[str, Any]: ...

    async def follow(self, sample: dict[str, Any], detect_timeout_s: float) -> None: ...

    async def outcome(self, sample: dict[str, Any]) -> None: ...


def at_once(drain_nodes: int) -> int:
    """How many rounds a batch holds: half the drain nodes fault, the other half take the requeued runs."""
    return max(1, drain_nodes // 2)


def batches(rounds: int, size: int) -> list[range]:
    """Round numbers in batches of `size`, in order: 20 rounds of 5 are 0-4, 5-9, 10-14, 15-19."""
    return [range(first, min(rounds, first + size)) for first in range(0, rounds, size)]


def responding(state: str) -> bool:
    """sinfo marks a node whose slurmd does not answer with a trailing `*`; DOWN waits for it to register."""
    return bool(state) and not state.endswith("*") and "down" not in state


def poll(check: Any) -> Any:
    """A plain predicate as the coroutine `rig.wait_for` polls."""
    async def wrapped() -> bool:
        return bool(check())
    return wrapped


async def node_class(bench: _Bench, kind: str, rounds: int, avoid: Sequence[str], drain_nodes: int) -> None:
    """`rounds` faults of `kind`, `at_once(drain_nodes)` at a time, each on its own node."""
    for batch in batches(rounds, at_once(drain_nodes)):
        await _batch(bench, kind, [f"{kind}-{i}" for i in batch], avoid)


async def _batch(bench: _Bench, kind: str, names: list[str], avoid: Sequence[str]) -> None:
    jobs = await asyncio.gather(*(bench.running_job(name, "--exclusive", f"--exclude={','.join(avoid)}")
                                  for name in names))
    placed: list[tuple[str, str, str]] = []
    for name, job in zip(names, jobs, strict=True):
        nodes = rig.job_nodes(job) if job else []
        if job is None or len(nodes) != 1:
            bench.failures.append(f"{name}: job {job} not on one node ({nodes})")
            if job:
                rig.scancel(job)
            continue
        placed.append((name, job, nodes[0]))
    if kind == "node-loss":  # jobs that have run 15 s: their output's rhythm is known by then
        await asyncio.gather(*(rig.wait_for(poll(lambda name=name, job=job: f"run {job}-0 iteration 75/" in
                                                 rig.read(bench.workdir / f"{name}.out")), 60)
                               for name, job, _ in placed))
    samples = [await bench.fault(kind, name, job, node) for name, job, node in placed]
    await asyncio.gather(*(_recover(bench, kind, sample) for sample in samples))
    # Done with this batch before the next: a job still running from it could share the next
    # batch's node and rightly be hit by its fault too.
    rig.scancel(*[s["job"] for s in samples], *[s["resumed_as"][0] for s in samples if s.get("resumed_as")])
    if kind == "node-failure":
        for sample in samples:
            # The faulted run's processes lived on without their slurmd (that is the fault); a node
            # is rebooted before it returns, so they go first, as they would with it.
            kill(rig.job_processes(bench.lab, sample["job"]))
            bench.lab.start_slurmd(sample["node"])
        await asyncio.gather(*(rig.wait_for(poll(lambda n=s["node"]: responding(bench.lab.node_state(n))), 90,
                                            poll_s=1) for s in samples))
    for sample in samples:
        bench.lab.resume_node(sample["node"])
    if kind == "node-failure":
        # Slurm 22.05 left the next batch's requeued jobs PENDING (Resources) for minutes after DOWN
        # with ten idle nodes that fit them: its select plugin's own node usage had gone stale after
        # these jobs (requeued off a node whose old run lived on, cancelled on the new one). A
        # reconfigure rebuilds it from the job table; docs/benchmarks.md has the trace.
        bench.lab.reconfigure()


def kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _recover(bench: _Bench, kind: str, sample: dict[str, Any]) -> None:
    if kind == "node-loss":
        await restore_when_drained(bench, sample, sample["node"])
    # Slurm's own detection (node-failure) takes up to SlurmdTimeout; 180 s covers the lab's 20 s.
    await bench.follow(sample, max(180, bench.slurmd_timeout_s + 90))
    await bench.outcome(sample)


async def restore_when_drained(bench: _Bench, sample: dict[str, Any], node: str) -> None:
    """The lost node back (slurmd, agent) once goodput drained it, or after 120 s without a drain."""
    assert bench.service is not None
    await rig.wait_for(poll(lambda: "drain" in bench.lab.node_state(node)), 120, poll_s=0.5)
    sample["restored_at"] = datetime.now(UTC)
    bench.lab.start_slurmd(node)
    bench.service.start_agent(node)
    await rig.wait_for(poll(lambda: responding(bench.lab.node_state(node))), 90, poll_s=1)
