"""Slurm's own side of one watcher scan, on a real lab: `python -m benchmarks scan-cost --lab-jobs N`.

The parser timings of `scan-cost` leave out what Slurm spends: slurmctld packing every job for the
client, and the client (squeue) printing them as JSON or as text lines. This brings up a lab of
the given Slurm version (its own directory and ports), queues N held jobs, and runs each of the
watcher's job reads, and a node agent's, several times: the bytes printed, the wall time, the
client's CPU (the children's rusage) and slurmctld's CPU (its /proc stat) per call, the latter also
over 20 calls in a row, below its clock tick. Held jobs never start, so the lab stays idle
and nothing else moves the counters.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._slurm_lab import Lab, LabSite, slurm_lab
from goodput.slurm.batch import MAX_BATCH, squeue_scan, squeue_status
from goodput.slurm.commands import squeue_json
from goodput.slurm.job_script import new_nonce, show_jobs_argv, show_jobs_script

SITE = LabSite(Path("/tmp/goodput-bench-scan-lab"), ctl_port=27817, slurmd_baseport=27900, rest_port=27820)
_TICKS = os.sysconf("SC_CLK_TCK")
CALLS = 20


def _ctld_cpu_s(lab: Lab) -> float:
    pid = lab.slurmctld_pid
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _queue(lab: Lab, jobs: int) -> None:
    """`jobs` held jobs, submitted eight at a time (one sbatch each: an array's pending tasks are
    one record until they start)."""
    script = (f"seq {jobs} | xargs -P 8 -I{{}} sbatch --hold --parsable -o /dev/null -J scan{{}} "
              "--wrap 'sleep 1' > /dev/null")
    done = lab.shell(script, timeout=max(120, jobs // 10))
    if done.returncode != 0:
        raise RuntimeError(f"queueing {jobs} jobs failed: {done.stderr[-500:]}")


def _timed(lab: Lab, argv: Sequence[str], rounds: int, *, ok: Sequence[int] = (0,),
           stdin: bytes | None = None) -> dict[str, float]:
    rows = []
    for _ in range(rounds):
        ctld, children, start = _ctld_cpu_s(lab), _children_cpu_s(), time.perf_counter()
        answer = subprocess.run(list(argv), env=lab.env, input=stdin, capture_output=True, timeout=300, check=False)
        if answer.returncode not in ok:
            raise RuntimeError(f"{' '.join(argv)} failed ({answer.returncode}): {answer.stderr[-300:]!r}")
        rows.append((time.perf_counter() - start, _children_cpu_s() - children, _ctld_cpu_s(lab) - ctld,
                     len(answer.stdout)))
    rows.sort()
    wall, client, ctld, size = rows[len(rows) // 2]  # the median call by wall time
    # slurmctld's CPU is counted in clock ticks (10 ms): over CALLS calls in a row, per call
    before = _ctld_cpu_s(lab)
    for _ in range(CALLS):
        subprocess.run(list(argv), env=lab.env, input=stdin, capture_output=True, timeout=300, check=False)
    per_call = (_ctld_cpu_s(lab) - before) / CALLS
    return {"bytes": size, "wall_s": round(wall, 3), "squeue_cpu_s": round(client, 3),
            "slurmctld_cpu_s": round(ctld, 3), "slurmctld_cpu_per_call_s": round(per_call, 4)}


def measure(slurm: str, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each job read of the watcher, before and after #29, on a lab of `slurm` with `jobs` queued."""
    with slurm_lab(SITE.moved_by(os.environ), nodes=2, cpus=4, slurm=slurm) as lab:
        _queue(lab, jobs)
        # a storm tick's status read of a full batch: one squeue of the list (before), one scontrol
        # asking for each job by its id on its standard input (now; goodput.slurm.job_script)
        batch = lab.shell("squeue --noheader --format=%i").stdout.split()[:MAX_BATCH]
        script = show_jobs_script(batch, new_nonce())
        # a node agent's read of its own node: the controller's lines of it (before), its slurmd (now);
        # the held jobs run nowhere, so the node lists no process (scontrol exits 1 saying so)
        few = batch[:4]
        return {f"squeue -j <{len(batch)} ids> (a storm tick's statuses, before)": _timed(
                    lab, squeue_status(batch), rounds),
                f"scontrol -o, show job x {len(batch)} (a storm tick's statuses, now)": _timed(
                    lab, show_jobs_argv(), rounds, stdin=script),
                f"squeue -j <{len(few)} ids> (before)": _timed(lab, squeue_status(few), rounds),
                f"scontrol -o, show job x {len(few)} (now)": _timed(
                    lab, show_jobs_argv(), rounds, stdin=show_jobs_script(few, new_nonce())),
                "squeue --json (every record)": _timed(lab, squeue_json(), rounds),
                "squeue --states=all (text lines)": _timed(lab, squeue_scan(), rounds),
                "squeue --nodelist=node1 (a node agent, before)": _timed(lab, squeue_scan(node="node1"), rounds),
                "scontrol listpids * node1 (a node agent, now)": _timed(
                    lab, ["scontrol", "listpids", "*", "node1"], rounds, ok=(0, 1))}
