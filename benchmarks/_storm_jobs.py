"""The lab jobs a `storm-lab` round fails, and what Slurm did to the nodes in the switch round.

Kept apart from benchmarks/storm_lab.py (the experiment) because this is setup and bookkeeping:

* the burst rounds: J single-CPU opt-in `--requeue` jobs anywhere on the lab;
* the switch round (#29): N nodes under the lab's one leaf switch (scripts/slurm-lab/up.sh puts
  every node under `lableaf`) fail at once, every job on them. The spare nodes are held out of
  service while the jobs are placed (so every job lands on a failing node without a `--nodelist`
  pin, which a requeued job would keep and wait for) and put back before the storm. Each job gets a
  GPU fault naming its node, so each node gets a node incident whose leader drains it;
* afterwards, from the workers' Slurm command log and slurmctld's own log: every drain command and
  the nodes in it, and the reasons each node was drained with.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._slurm_lab import Lab
from benchmarks._storm_lab_rig import shim_commands
from goodput.ownership import owning_incident
from goodput.recover.shared_fault import owning_fault
from goodput.slurm.hostlist import expand_hostlist

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
SPARE_HOLD = "storm-lab: spare held while the switch round places its jobs"


async def sh(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:2]} failed: {err.decode()[-500:]}")
    return out.decode()


async def submit_jobs(count: int, name: str, workdir: Path, cpus: int = 1) -> list[str]:
    """`count` opt-in `--requeue` sleep jobs of `cpus` CPUs, all running before the storm starts."""
    gate = asyncio.Semaphore(4)

    async def one() -> str:
        async with gate:
            out = await sh("sbatch", "--parsable", "--comment=goodput:opt-in", "--requeue", f"--job-name={name}",
                           "--ntasks=1", f"--cpus-per-task={cpus}", f"--output={workdir}/%x-%j.out",
                           f"--chdir={workdir}", "--wrap", "exec sleep 100000")
        return out.strip().split(";")[0]

    jobs = list(await asyncio.gather(*(one() for _ in range(count))))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        states = (await sh("squeue", "--noheader", f"--name={name}", "--format=%T")).split()
        if len(states) == count and set(states) == {"RUNNING"}:
            return jobs
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the {count} jobs were not all running within 180 s")


async def cancel_jobs(name: str) -> None:
    await sh("scancel", f"--name={name}")
    for _ in range(120):
        if not (await sh("squeue", "--noheader", f"--name={name}", "--format=%i")).split():
            return
        await asyncio.sleep(0.5)


async def switch_jobs(lab: Lab, failing: int, nodes: int, per_node: int, cpus: int, name: str,
                      workdir: Path) -> dict[str, str]:
    """Job id → node: `per_node` jobs filling each of node1..node<failing> (`cpus` each), the other
    nodes held meanwhile."""
    spares = [f"node{i}" for i in range(failing + 1, nodes + 1)]
    for node in spares:
        await sh("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={SPARE_HOLD}")
    try:
        jobs = await submit_jobs(failing * per_node, name, workdir, max(1, cpus // per_node))
    finally:
        for node in spares:
            lab.resume_node(node)
    placed: dict[str, str] = {}
    for line in (await sh("squeue", "--noheader", f"--name={name}", "--format=%i %N")).splitlines():
        job, _, node = line.strip().partition(" ")
        placed[job] = node
    return {job: placed[job] for job in jobs}


def restore_nodes(lab: Lab, failing: int) -> None:
    """Back into service after the round, as an operator would after the switch is fixed."""
    for i in range(1, failing + 1):
        lab.resume_node(f"node{i}")


_DRAINED = re.compile(r"update_node: node (\S+) reason set to: (.*)$", re.MULTILINE)


def drains(shim_log: Path, slurmctld_log: str, failing: int) -> dict[str, Any]:
    """The drain commands the workers ran (nodes in each) and, from slurmctld, each failing node's
    drains: exactly one, with goodput's reason, is right."""
    commands = [line.split()[2] for line, _ in shim_commands(shim_log)
                if line.startswith("scontrol update NodeName=") and line.endswith(" State=DRAIN")]
    sizes = [len(expand_hostlist(c.removeprefix("NodeName="))) for c in commands]
    by_node: dict[str, list[str]] = {}
    for node, reason in _DRAINED.findall(slurmctld_log):
        by_node.setdefault(node, []).append(reason.strip())
    nodes = [f"node{i}" for i in range(1, failing + 1)]
    reasons = [r for n in nodes for r in by_node.get(n, [])]
    return {"drain_commands": len(commands), "nodes_per_drain_command": sizes,
            "drains_per_node": dict(Counter(str(len(by_node.get(n, []))) for n in nodes)),
            "every_node_drained_once_by_goodput": all(
                len(by_node.get(n, [])) == 1 and owning_incident(by_node[n][0]) is not None for n in nodes),
            "drain_reasons": len(set(reasons)),
            "faults": sorted({f for r in reasons if (f := owning_fault(r))})}
