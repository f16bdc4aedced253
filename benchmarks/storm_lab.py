"""`storm-lab`: the anomaly storm against a real Slurm lab, with 1, 2 and 4 `goodput worker` processes.

Why: Temporal is goodput's distributed engine (workers on several head nodes share one Temporal
cluster), and `storm` only shows one in-process worker against the fake scheduler. Here each
worker count gets a fresh task queue and cluster name, N real `goodput worker` processes
(GOODPUT_* settings, shipped defaults except what must be set), J running opt-in `--requeue` jobs
in the lab, and M anomalies (several per job: duplicates must fold) over S seconds, injected as a
detector does (through `IncidentSink`: signal-with-start, a job's anomalies folded while one
delivery for it is in flight). Every incident requeues its job (no node blamed, no drain).

Measured per worker count: anomalies/s accepted and the inject latency; incidents/s recovered and
closed; per incident, first anomaly → the worker's `scontrol requeue` → slurmctld's own "Requeuing"
(once the job ended and its epilog ran) and "Started" log lines, → RECOVERED in the incident's
timeline, → workflow closed (after the policy's 30 s linger); correctness (one incident per job,
Restarts=1 per job in Slurm, no anomaly lost); the cost of one incident: history events and
activities (every history fetched), Temporal frontend RPCs and persistence requests (the dev
server's own Prometheus counters), Slurm commands (shims on the workers' PATH) and CPU seconds
(/proc) of the workers, their Slurm commands, Temporal and slurmctld; where Temporal queues
(workflow task waits, each activity's time, from the histories) and what the server refused (its
error counters). Before the storms, one paced round (20 incidents at 100 a minute, one worker)
measures the cost of an incident when nothing queues: the anchor for docs/scaling.md's on-paper
extrapolation. One lab and one dev server (SQLite+WAL, as `goodput up`; its shard count read from
its printed config) serve all rounds.
On a cluster the lab's slurmd, their slurmstepd, prologs, epilogs and jobs run on the compute
nodes; here they share the head node's cores, and at 500 jobs they used more CPU than Temporal and
the worker together (`cpu_s.rest_of_machine`). `--compute-nice 19` lets the head node's processes go
first; it is off by default because it did not help in the runs that tried it (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client

from benchmarks import _storm_lab_rig as rig
from benchmarks._entity_costs import entity_costs, entity_row
from benchmarks._git import commit
from benchmarks._harness import connect, emit, environment, summary
from benchmarks._history_costs import histories, mean_to_requeue
from benchmarks._slurm_lab import Lab, slurm_lab
from benchmarks._storm_jobs import XID, cancel_jobs, drains, restore_nodes, submit_jobs, switch_jobs
from benchmarks._storm_timeline import breakdown, milestones, shown
from goodput.entity_lane import entity_queue
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.recover.trust import AutonomyPolicy
from workers.client import TemporalIncidentService
from workers.watch import IncidentSink

GOODPUT = Path(sys.executable).parent / "goodput"
NCCL = ("[rank0]:[E1129 06:22:43.551920 41877 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=96022, OpType=ALLREDUCE) ran for 600083 milliseconds before timing out.")
KEY = "storm-lab-shared-resubmit-key-0123456789"  # one value for every worker of the deployment
# The switch round's workers: a switch's node incidents drain as one fault after its first (docs/scaling.md,
# "Shared faults"); 60 s is the shipped default since 29d464c, set here so older commits measure alike.
SWITCH_SETTINGS = {"GOODPUT_POLICY__NODE_INCIDENT__SHARED_DRAIN_WINDOW_S": "60"}


def p(values: list[float], q: str = "p50", scale: float = 1.0) -> float:
    return round(summary(values)[q] * scale, 3) if values else float("nan")


def overrides(address: str, queue: str, cluster: str) -> dict[str, str]:
    """The only settings changed from the shipped defaults (data_dir is per worker)."""
    return {"GOODPUT_SCHEDULER": "slurm-cli", "GOODPUT_POLICY__MODE": "autonomous", "GOODPUT_WATCH": "false",
            # the loop acting, not an operator's approval: every verdict acts, one signal drains
            "GOODPUT_POLICY__AUTONOMY__EARNED": "false", "GOODPUT_POLICY__EXCLUDE_BEFORE_DRAIN__ENABLED": "false",
            "GOODPUT_TEMPORAL_ADDRESS": address, "GOODPUT_TASK_QUEUE": queue, "GOODPUT_CLUSTER": cluster,
            "GOODPUT_RESUBMIT_KEY": KEY}


async def storm(client: Client, queue: str, cluster: str, jobs: list[str], args: argparse.Namespace,
                seed: int, paced: bool, on: dict[str, str] | None = None) -> dict[str, Any]:
    """M anomalies over S seconds. A storm: every job gets one, the rest land on random jobs at
    random times. Paced: job i fails at i × S/J, its anomalies within the next half second. A switch
    (`on`: job → node): every job's GPU fault names its node, all within half a second."""
    rng = random.Random(seed)
    step = args.seconds / len(jobs)
    plan = sorted(((i % len(jobs) * step + rng.uniform(0, 0.5), jobs[i % len(jobs)]) if paced else
                   (rng.uniform(0, args.seconds), jobs[i] if i < len(jobs) else rng.choice(jobs))
                   for i in range(args.anomalies)), key=lambda pair: pair[0]) if on is None else \
        sorted(((rng.uniform(0, 0.5), job) for job in jobs), key=lambda pair: pair[0])
    policy = Policy(mode=Mode.AUTONOMOUS, autonomy=AutonomyPolicy(earned=False),
                    exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=False),
                    breaker=BreakerPolicy(max_drained_nodes=max(4, args.switch)))
    # Through the sink every detector uses: it folds a job's anomalies while one delivery is in flight.
    sink = IncidentSink(TemporalIncidentService(client, queue), policy)
    first: dict[str, float] = {}
    latency: list[float] = []
    start_latency: list[float] = []
    done: list[float] = []
    errors: list[str] = []
    incidents: set[str] = set()
    t0 = time.monotonic()
    wall0 = time.time()

    async def send(offset: float, job: str) -> None:
        await asyncio.sleep(max(0.0, t0 + offset - time.monotonic()))
        now = datetime.now(UTC)
        anomaly = Anomaly(id=f"sl-{uuid.uuid4().hex[:16]}", source=AnomalySource.LOG, kind=AnomalyKind.CRASH,
                          cluster=cluster, job_id=job, category=Category.NCCL_TIMEOUT, evidence=[NCCL],
                          observed_at=now, detected_at=now) if on is None else \
            Anomaly(id=f"sl-{uuid.uuid4().hex[:16]}", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT,
                    cluster=cluster, job_id=job, nodes=(on[job],), evidence=[XID], observed_at=now, detected_at=now)
        first.setdefault(job, time.time())
        sent = time.monotonic()
        try:
            result = await sink.deliver(anomaly)
        except Exception as err:  # a refused anomaly is the measurement, not a crash
            errors.append(f"{job}: {err}")
            return
        latency.append(time.monotonic() - sent)
        done.append(time.monotonic() - t0)
        if result.new_incident:
            start_latency.append(latency[-1])
        if result.note:
            errors.append(f"{job}: {result.note}")
        incidents.add(result.incident_id)

    await asyncio.gather(*(send(offset, job) for offset, job in plan))
    window = max(done) - plan[0][0] if done else float("nan")
    return {"first": first, "latency": latency, "start_latency": start_latency, "errors": errors,
            "incidents": incidents, "accepted": len(latency), "window_s": window, "t0": wall0}


async def wait_closed(client: Client, queue: str, timeout_s: float) -> bool:
    query = f"TaskQueue = '{queue}' AND WorkflowType = 'RecoveryWorkflow' AND ExecutionStatus = 'Running'"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (await client.count_workflows(query)).count == 0:
            return True
        await asyncio.sleep(1.0)
    return False


async def run_round(count: int, client: Client, temporal: rig.Temporal, lab: Lab, tmp: Path,
                    args: argparse.Namespace, paced: bool = False, switch: int = 0) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:4] + ("p" if paced else "s" if switch else "")
    cluster, queue, name = f"lab{count}w{tag}", f"storm-lab-{count}w-{tag}", f"storm{count}w{tag}"
    root = tmp / name
    workdir = root / "jobs"
    workdir.mkdir(parents=True)
    workdir.chmod(0o755)
    shim_log = root / "slurm-commands.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env |= overrides(temporal.address, queue, cluster) | (SWITCH_SETTINGS | {
        "GOODPUT_POLICY__BREAKER__MAX_DRAINED_NODES": str(max(4, switch))} if switch else {})
    env["PATH"] = f"{rig.slurm_shims(root / 'shims', shim_log)}:{env.get('PATH', '')}"
    lab_from = lab.slurmctld_log.stat().st_size
    try:
        on = await switch_jobs(lab, switch, args.nodes, args.switch_jobs, args.cpus, name, workdir) if switch else None
        jobs = list(on) if on else await submit_jobs(args.jobs, name, workdir)
        workers = rig.start_workers(count, env, root, GOODPUT)
        try:
            before = rig.snapshot(temporal, workers, lab)
            sent = await storm(client, queue, cluster, jobs, args, args.seed + count, paced, on)
            closed = await wait_closed(client, queue, args.timeout)
            after = rig.snapshot(temporal, workers, lab)
            rows = await histories(client, sent["incidents"])
            entities = await entity_costs(client, cluster)
        finally:
            rig.stop_workers(workers)
        spent = rig.cost(before, after, len(rows))
        others = Counter([wf.workflow_type async for wf in client.list_workflows(
            f"TaskQueue = '{queue}' OR TaskQueue = '{entity_queue(queue)}'")])
        job_set = set(jobs)
        slurm = rig.job_events(lab.slurmctld_log, job_set, sent["t0"] - 1)
        in_slurm = rig.restarts(job_set)
    finally:
        await cancel_jobs(name)
        if switch:
            restore_nodes(lab, switch)
    audit = Counter(json.loads(line).get("action", "?") for w in workers if (w.data_dir / "audit.jsonl").exists()
                    for line in (w.data_dir / "audit.jsonl").read_text().splitlines() if line.strip())
    first = sent["first"]
    reports = {i: r["report"] for i, r in rows.items()}
    by_job = {r.key.job_id: r for r in reports.values()}
    t_first = min(first.values())

    def since_first(job: str, at: float | None) -> float | None:
        return at - first[job] if at is not None else None

    recovered_at = {r.key.job_id: next((e.at.timestamp() for e in r.timeline if e.state is IncidentState.RECOVERED),
                                       None) for r in reports.values()}
    requeue = [since_first(j, min(ts)) for j, ts in slurm.requeued.items()]
    sent_at = rig.requeues_sent(shim_log)
    requeue_sent = [since_first(j, t) for j, t in sent_at.items() if j in first]
    restart = [since_first(j, min((t for t in slurm.started.get(j, []) if t > min(ts)), default=None))
               for j, ts in slurm.requeued.items()]
    recovered = [since_first(j, t) for j, t in recovered_at.items()]
    closed_s = [since_first(r["report"].key.job_id, r["closed"]) for r in rows.values()]
    requeued_at = {j: min(ts) for j, ts in slurm.requeued.items() if ts}
    timeline = breakdown(milestones(r["events"], first.get(j), requeued_at.get(j), sent_at.get(j))
                         for r in rows.values() for j in [r["report"].key.job_id])
    opened = [since_first(r["report"].key.job_id, r["opened"]) for r in rows.values()]
    recovered_times = [t for t in recovered_at.values() if t is not None]
    events = [sum(r["types"].values()) for r in rows.values()]
    activities = [sum(r["activities"].values()) for r in rows.values()]
    n = max(1, len(rows))
    slurm_cmds = rig.slurm_commands(shim_log)
    shared = drains(shim_log, lab.slurmctld_log.read_bytes()[lab_from:].decode(errors="replace"), switch) \
        if switch else {}
    return {
        "workers": count, "arrival": "paced" if paced else f"switch {switch}" if switch else "storm",
        "seconds": args.seconds, "cluster": cluster, **shared,
        "node_incidents": others.get("NodeIncidentWorkflow", 0),
        "task_queue": queue, "jobs": len(jobs), "anomalies": args.anomalies,
        "all_closed_in_time": closed,
        "accepted": sent["accepted"], "inject_errors": len(sent["errors"]), "errors_sample": sent["errors"][:3],
        "accepted_per_s": round(sent["accepted"] / sent["window_s"], 1), "offered_per_s": args.anomalies / args.seconds,
        "inject_latency_ms": {q: p(sent["latency"], q, 1000) for q in ("p50", "p99")},
        "start_latency_ms": {q: p(sent["start_latency"], q, 1000) for q in ("p50", "p99")},
        "incidents": len(reports), "expected": len(jobs),
        "one_incident_per_job": len(by_job) == len(jobs) == len(reports),
        "lost": args.anomalies - sum(r.anomaly_count for r in reports.values()),
        "outcomes": dict(Counter(str(r.state) for r in reports.values())),
        "slurm_requeues_per_job": dict(Counter(str(len(slurm.requeued.get(j, []))) for j in jobs)),
        "slurm_restarts_per_job": dict(Counter(str(r) for _, r in in_slurm.values())),
        "slurm_states": dict(Counter(s for s, _ in in_slurm.values())),
        # slurmctld's own lines about (at most 3 of) the jobs it requeued more than once
        "requeued_more_than_once": {j: rig.job_lines(lab.slurmctld_log, j) for j in
                                    [j for j in sorted(jobs) if len(slurm.requeued.get(j, [])) > 1][:3]},
        "audit_actions": dict(audit),
        "recovered_per_s": round(len(recovered_times) / (max(recovered_times) - t_first), 2)
        if recovered_times else float("nan"),
        "all_recovered_s": round(max(recovered_times) - t_first, 1) if recovered_times else float("nan"),
        "all_closed_s": round(max(r["closed"] for r in rows.values()) - t_first, 1) if rows else float("nan"),
        "closed_per_s": round(len(rows) / (max(r["closed"] for r in rows.values()) - t_first), 2)
        if rows else float("nan"),
        "latency_s": {what: {q: p([v for v in values if v is not None], q) for q in ("p50", "p99")} for what, values in
                      (("opened", opened), ("requeue_sent", requeue_sent), ("requeued", requeue),
                                       ("restarted", restart),
                                       ("recovered", recovered), ("closed", closed_s))},
        "straight_path_s": timeline,
        "latency_source": "opened, closed: the workflow's history; requeue_sent: when a worker ran "
                          "`scontrol requeue` for the job (the Slurm command shims' log); requeued, restarted: "
                          "slurmctld.log (`Requeuing` is logged once the job's processes ended and its epilog "
                          "ran); recovered: the incident's timeline; all from the first anomaly sent for the job",
        "history_events_per_incident": {"mean": round(statistics.fmean(events), 1) if events else 0,
                                        "max": max(events, default=0)},
        "events_per_incident_by_type": {k: round(v / n, 2) for k, v in
                                        sum((r["types"] for r in rows.values()), Counter()).most_common()},
        "to_requeue_per_incident": mean_to_requeue(r["to_requeue"] for r in rows.values()),
        "activities_per_incident": round(statistics.fmean(activities), 2) if activities else 0,
        "activities_per_incident_by_type": {k: round(v / n, 2) for k, v in
                                            sum((r["activities"] for r in rows.values()), Counter()).most_common()},
        "slurm_commands_per_incident": round(sum(slurm_cmds.values()) / n, 2),
        "slurm_commands_per_incident_by_command": {k: round(v / n, 2) for k, v in slurm_cmds.most_common()},
        "workflow_task_wait_ms": {q: p([w for r in rows.values() for w in r["wft_wait"]], q, 1000)
                                  for q in ("p50", "p99")},
        "workflow_task_round_trip_ms": {q: p([w for r in rows.values() for w in r["wft_trip"]], q, 1000)
                                        for q in ("p50", "p99")},
        "activity_ms_p50_by_type": {k: p([t for r in rows.values() for t in r["took"].get(k, [])], "p50", 1000)
                                    for k in sorted({k for r in rows.values() for k in r["took"]})},
        "workflows_on_queue": dict(others), "entities": entities, **spent,
    }


ROWS: list[tuple[str, Any]] = [
    ("anomalies accepted / sent", lambda r: f"{r['accepted']} / {r['anomalies']}"),
    ("anomalies/s accepted (offered)", lambda r: f"{r['accepted_per_s']:.0f} ({r['offered_per_s']:.0f})"),
    ("inject latency p50 / p99", lambda r: f"{r['inject_latency_ms']['p50']:.0f} / "
                                           f"{r['inject_latency_ms']['p99']:.0f} ms"),
    ("incidents / jobs (one per job)", lambda r: f"{r['incidents']} / {r['jobs']} ({r['one_incident_per_job']})"),
    ("anomalies lost", lambda r: str(r["lost"])),
    ("Slurm restarts per job", lambda r: ", ".join(f"{k}×{v}" for k, v in sorted(r["slurm_restarts_per_job"].items()))),
    ("outcomes", lambda r: ", ".join(f"{k}={v}" for k, v in sorted(r["outcomes"].items()))),
    ("incidents/s recovered (all after)", lambda r: f"{r['recovered_per_s']:.2f} ({r['all_recovered_s']:.0f} s)"),
    ("incidents/s closed (all after)", lambda r: f"{r['closed_per_s']:.2f} ({r['all_closed_s']:.0f} s)"),
    *[(f"→ {what} p50 / p99", lambda r, w=what: f"{r['latency_s'][w]['p50']:.1f} / {r['latency_s'][w]['p99']:.1f} s")
      for what in ("opened", "requeue_sent", "requeued", "restarted", "recovered", "closed")],
    ("workflow task wait p50 / p99", lambda r: f"{r['workflow_task_wait_ms']['p50']:.0f} / "
                                               f"{r['workflow_task_wait_ms']['p99']:.0f} ms"),
    ("workflow task round trip p50 / p99", lambda r: f"{r['workflow_task_round_trip_ms']['p50']:.0f} / "
                                                     f"{r['workflow_task_round_trip_ms']['p99']:.0f} ms"),
    *[(f"{what} activity p50", lambda r, w=what: f"{r['activity_ms_p50_by_type'].get(w, float('nan')):.0f} ms")
      for what in ("consult_memory_and_trust", "resume", "verify")],  # attribute runs local (fewer-steps)
    *[(f"{label}: tasks / updates (size) / sig.", lambda r, e=entity: entity_row(r["entities"][e]))
      for label, entity in (("memory", "node_memory"), ("record", "trust_record"))],
    ("history events / incident", lambda r: f"{r['history_events_per_incident']['mean']:.0f}"),
    ("to requeue: events / workflow tasks", lambda r: f"{r['to_requeue_per_incident'].get('events', 0):.0f} / "
                                                      f"{r['to_requeue_per_incident'].get('workflow_tasks', 0):.1f}"),
    ("activities / incident", lambda r: f"{r['activities_per_incident']:.1f}"),
    ("frontend RPCs / incident", lambda r: f"{r['frontend_rpcs_per_incident']:.0f}"),
    ("persistence requests / incident", lambda r: f"{r['persistence_requests_per_incident']:.0f}"),
    ("Slurm commands / incident", lambda r: f"{r['slurm_commands_per_incident']:.1f}"),
    ("CPU ms / incident: workers", lambda r: f"{r['cpu_ms_per_incident']['workers']:.0f}"),
    ("  their Slurm commands", lambda r: f"{r['cpu_ms_per_incident']['slurm_commands']:.0f}"),
    ("  Temporal dev server", lambda r: f"{r['cpu_ms_per_incident']['temporal']:.0f}"),
    ("cores busy: workers+cmds / Temporal", lambda r: f"{r['cores_busy']['workers']:.2f} / "
                                                      f"{r['cores_busy']['temporal']:.2f}"),
    ("machine busy (2 cores = 100 %)", lambda r: f"{100 * r['machine_busy']:.0f} %"),
]


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    site = rig.LAB.moved_by(os.environ)
    with tempfile.TemporaryDirectory(prefix="goodput-storm-lab-") as tmp, \
            slurm_lab(site, args.nodes, args.cpus, {"SLURMLAB_SLURMD_NICE": str(args.compute_nice)}) as lab, \
            rig.temporal_server(Path(tmp)) as temporal:
        client = await connect(temporal.address)
        rig.compile_workflows()
        rounds = []
        if args.paced:  # the target rate, 100 incidents a minute, 3 anomalies each, one worker
            calm = argparse.Namespace(**{**vars(args), "jobs": args.paced, "anomalies": 3 * args.paced,
                                         "seconds": args.paced * 60 / 100})
            rounds.append(await run_round(1, client, temporal, lab, Path(tmp), calm, paced=True))
        rounds += [await run_round(count, client, temporal, lab, Path(tmp), args) for count in args.workers]
        if args.switch:  # every job of `switch` nodes under the lab's one leaf switch, one worker
            hit = args.switch * args.switch_jobs
            failing = argparse.Namespace(**{**vars(args), "jobs": hit, "anomalies": hit})
            rounds.append(await run_round(1, client, temporal, lab, Path(tmp), failing, switch=args.switch))
        server = {"history_shards": temporal.config("numHistoryShards"), "persistence": temporal.config("pluginName"),
                  "sqlite_journal": "wal", "source": "the server's own printed config (--log-config)"}
    shown = {k: ("<one shared 40-char value>" if k == "GOODPUT_RESUBMIT_KEY" else v)
             for k, v in overrides("<dev server>", "<per round>", "<per round>").items()}
    return {"benchmark": "storm-lab", "commit": commit("goodput", "workers", "workflows", "activities", "benchmarks",
                                                       untracked=True),
            "parameters": {k: v for k, v in vars(args).items() if k != "json"},
            "lab": {**site.env(), "SLURMLAB_NODES": args.nodes, "SLURMLAB_CPUS": args.cpus,
                    "SLURMLAB_SLURMD_NICE": args.compute_nice},
            "worker_settings_overridden": {**shown, "GOODPUT_DATA_DIR": "<per worker>"},
            "temporal_server": server, "rounds": rounds, "wall_s": round(time.monotonic() - started, 1),
            "environment": environment()}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks storm-lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",") if x], default=[1, 2, 4],
                        help="worker process counts, one round each (default 1,2,4)")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--anomalies", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--paced", type=int, default=20,
                        help="first, a round of this many incidents at 100 a minute with one worker (0: none)")
    parser.add_argument("--switch", type=int, default=0,
                        help="last, a round where this many nodes under one switch fail at once, every job on "
                             "them (0: none; the lab needs more nodes than this: the others are the spares)")
    parser.add_argument("--switch-jobs", type=int, default=2, help="jobs per failing node in the switch round")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=32, help="advertised CPUs per lab node (one per job)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every incident to close")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--compute-nice", type=int, default=0, choices=range(20), metavar="0..19",
                        help="nice of the lab's slurmd and all they start (slurmstepd, prolog, epilog, jobs): on a "
                             "cluster these run on the compute nodes, here on the head node's cores; 19 lets the "
                             "head node's processes (Temporal, workers, slurmctld) go first (default 0: in three "
                             "100-job runs it did not help, docs/scaling.md)")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.jobs > args.nodes * args.cpus:
        raise SystemExit(f"{args.jobs} jobs do not fit on {args.nodes} nodes × {args.cpus} CPUs")
    if args.switch and not (args.switch < args.nodes and 1 <= args.switch_jobs <= args.cpus):
        raise SystemExit(f"a switch round of {args.switch} nodes needs more lab nodes (--nodes {args.nodes}) "
                         f"and 1..{args.cpus} jobs per node")
    try:
        with rig.taken_down_on_signal():  # a killed benchmark takes its lab, server and workers down
            result = asyncio.run(run_all(args))
    except rig.Terminated as stop:
        raise SystemExit(128 + stop.signum) from None
    server = result["temporal_server"]
    print(f"storm-lab: a storm of {args.anomalies} anomalies in {args.seconds:.0f} s across {args.jobs} running jobs "
          f"(and {args.paced} paced incidents at 100/min) on a Slurm lab ({args.nodes} nodes × {args.cpus} CPUs); "
          f"Temporal dev server ({server['persistence']}+WAL, "
          f"{server['history_shards']} history shard); commit {result['commit']}; {result['wall_s']:.0f} s")
    print(f"  {'arrival':<38}" + "".join(f"{r['arrival'] + ' ' + format(r['seconds'], '.0f') + ' s':>18}"
                                         for r in result["rounds"]))
    print(f"  {'goodput worker processes':<38}" + "".join(f"{r['workers']:>18}" for r in result["rounds"]))
    for label, cell in ROWS:
        print(f"  {label:<38}" + "".join(f"{cell(r):>18}" for r in result["rounds"]))
    print("\n".join(line for r in result["rounds"] for line in shown(r)))
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
