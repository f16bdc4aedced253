"""`python -m benchmarks scan-cost [--nodes N] [--jobs N] [--dead N] [--json]`: what one cluster
watcher scan costs goodput as the cluster grows.

The watcher asks Slurm about the cluster every poll (2 s by default). This builds the answers a
cluster of `--nodes` nodes with `--jobs` jobs in the queue would give, from the answers recorded on
this project's labs (tests/fixtures/slurm: Slurm 22.05's and 24.11's `squeue --json` and
`sinfo --json`, and the text lines of the dead-node query), and times goodput's own parsers on
them: the bytes to read and the seconds of this process's CPU per scan. The job lines the watcher
scans since #29 (`squeue --states=all`, id, state, restart count, nodes, partition) are grown the
same way from the 22.05 lab's recorded lines. It does not time Slurm's
side (slurmctld packing the answer, the clients printing it); that needs a cluster of that size.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import _scan_lab
from benchmarks._harness import emit, environment
from goodput.slurm.batch import parse_dead_nodes, parse_scan
from goodput.slurm.jsonout import parse_sinfo_json, parse_squeue_json

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slurm"
SOURCES = {"22.05": (FIXTURES / "squeue-22.05.json", FIXTURES / "sinfo-22.05.json"),
           "24.11": (FIXTURES / "24.11" / "squeue-24.11.json", FIXTURES / "24.11" / "sinfo-24.11.json")}
SCAN_LINES = FIXTURES / "squeue-scan-22.05.txt"
DEAD_LINE = "gpu-{i:05d}|down+not_responding|Not responding|"


def _grown(path: Path, key: str, count: int, rename: Callable[[dict[str, Any], int], None]) -> str:
    """The recorded answer with its list grown to `count` entries, each renamed to be distinct."""
    document = json.loads(path.read_text())
    recorded = document[key]
    grown = []
    for i in range(count):
        entry = copy.deepcopy(recorded[i % len(recorded)])
        rename(entry, i)
        grown.append(entry)
    document[key] = grown
    return json.dumps(document)


def _rename_job(entry: dict[str, Any], i: int) -> None:
    entry["job_id"] = 500_000 + i


def _rename_node(entry: dict[str, Any], i: int) -> None:
    name = f"gpu-{i:05d}"
    if isinstance(entry.get("nodes"), dict):  # 24.11's sinfo: one group per node (--Node)
        entry["nodes"]["nodes"] = [name]
    else:
        entry["name"] = entry["hostname"] = name


def _grown_lines(path: Path, count: int) -> str:
    """The recorded job lines grown to `count`, each with a distinct job id."""
    recorded = [line.split("|", 1)[1] for line in path.read_text().splitlines() if line]
    return "".join(f"{500_000 + i}|{recorded[i % len(recorded)]}\n" for i in range(count))


def _timed(parse: Callable[[str], Sequence[object]], text: str, rounds: int) -> dict[str, float]:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        parsed = parse(text)
        best = min(best, time.process_time() - start)
    return {"bytes": len(text.encode()), "entries": len(parsed), "cpu_s": round(best, 4)}


def run(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scan-cost", description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--dead", type=int, default=20, help="troubled nodes the text query returns")
    parser.add_argument("--rounds", type=int, default=3, help="each parse is timed this often; the best counts")
    parser.add_argument("--lab-jobs", type=int, default=0,
                        help="also queue this many held jobs on a real lab and time Slurm's side of each read")
    parser.add_argument("--slurm", default="22.05", help="the labs' Slurm versions, comma-separated (with --lab-jobs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    for version, (squeue, sinfo) in SOURCES.items():
        key = "sinfo" if "sinfo" in json.loads(sinfo.read_text()) else "nodes"
        rows[f"squeue --json, {version}"] = _timed(parse_squeue_json, _grown(squeue, "jobs", args.jobs, _rename_job),
                                                   args.rounds)
        rows[f"sinfo --json, {version}"] = _timed(parse_sinfo_json, _grown(sinfo, key, args.nodes, _rename_node),
                                                  args.rounds)
    rows["squeue --states=all (text lines), 22.05"] = _timed(parse_scan, _grown_lines(SCAN_LINES, args.jobs),
                                                            args.rounds)
    dead = "".join(DEAD_LINE.format(i=i) + "\n" for i in range(args.dead))
    rows["sinfo --states=down,fail,no_respond (text)"] = _timed(parse_dead_nodes, dead, args.rounds)
    on_lab = {version: _scan_lab.measure(version, args.lab_jobs, args.rounds)
              for version in args.slurm.split(",")} if args.lab_jobs else {}
    if not args.json:
        for version, reads in on_lab.items():
            print(f"Slurm {version}'s side, {args.lab_jobs} queued jobs (median call):")
            for name, lab_row in reads.items():
                print(f"  {name:48} {lab_row['bytes'] / 1e6:7.2f} MB wall {lab_row['wall_s']:6.3f} s "
                      f"client {lab_row['squeue_cpu_s']:6.3f} s slurmctld {lab_row['slurmctld_cpu_s']:6.3f} s "
                      f"({lab_row['slurmctld_cpu_per_call_s']:.4f} s a call over 20)")
        print(f"one watcher scan at {args.nodes} nodes, {args.jobs} jobs, {args.dead} dead nodes:")
        for name, row in rows.items():
            print(f"  {name:48} {row['bytes'] / 1e6:9.2f} MB {int(row['entries']):7} entries {row['cpu_s']:7.3f} s")
    emit({"benchmark": "scan-cost", "environment": environment(), "parameters": vars(args), "scans": rows,
          "on_lab": on_lab}, args.json)
