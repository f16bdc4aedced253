"""`console`: is the Recovery Console fast at 2,000 open and 100,000 closed incidents?

The issue asks for exactly that ("paginate; use search attributes and visibility queries, not a
scan of every history"), and `workers/console/backend.py` claims it. This measures it, in one run,
on the shipped default: the embedded dev server with SQLite + WAL, started as `goodput up` starts
it. The console only ever reads visibility (search attributes, page tokens, count queries) for its
lists, so the population does not need real recoveries: RecoveryWorkflow executions are started
with goodput's search attributes (varied, realistic values) on a task queue that no worker polls.
Open incidents stay Running; closed ones are started and terminated at once. Populating is capped
by a time budget: if it runs out, the closed count actually reached is what is reported, never the
target. Then the console's own code (ConsoleBackend, and optionally GET /incidents through the
served console) is timed against that server: first pages under six filters, ten pages deep,
counts() (one count query per incident state, what every list refresh and SSE tick runs), all(limit=2000),
and what the obvious fixes would cost (the counts run concurrently, GROUP BY).

Every StartTime falls inside the populate window, so "since 24h" selects everything of its
category here: the time filter is measured at its least selective.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, RPCError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from benchmarks._git import commit
from benchmarks._harness import connect, emit, environment, free_port, percentile, served
from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.console.filters import IncidentFilter
from goodput.models import Category, IncidentKey, Mode
from goodput.recover.incident import RecoveryStart
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from workers import devserver
from workers.console.backend import BASE_QUERY, ConsoleBackend, visibility_query
from workers.console.context import ConsoleContext
from workers.console.server import serve_console
from workflows import search

NO_WORKER_QUEUE = "console-bench-no-worker"
S = IncidentState
OPEN_STATES = {S.DETECTED: 3, S.ATTRIBUTED: 3, S.PLANNED: 4, S.AWAITING_APPROVAL: 45, S.ISOLATING: 10,
               S.RESUMING: 10, S.VERIFYING: 25}
CLOSED_STATES = {S.RECOVERED: 55, S.RECOMMENDED_ONLY: 20, S.ESCALATED: 15, S.CANCELLED: 5, S.STOPPED: 5}
CLUSTERS = {"prod-a": 5, "prod-b": 3, "research": 2}
CATEGORIES = {Category.GPU_HARDWARE: 30, Category.NVLINK: 8, Category.NETWORK: 12, Category.NCCL_TIMEOUT: 15,
              Category.HANG: 8, Category.STRAGGLER: 5, Category.OOM: 6, Category.APP_ERROR: 8, Category.STORAGE: 3,
              Category.NODE_FAILURE: 5}
HARDWARE = {Category.GPU_HARDWARE, Category.NVLINK, Category.NETWORK, Category.NODE_FAILURE, Category.STRAGGLER}
MODES = {Mode.MONITOR: 3, Mode.APPROVE: 4, Mode.AUTONOMOUS: 3}
PARTITIONS = {"gpu": 7, "long": 2, "debug": 1}
NODES_PER_CLUSTER = 512
JOBS = 25_000


def pick(rng: random.Random, weights: dict[Any, int]) -> Any:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def incident(i: int, closed: bool, rng: random.Random) -> tuple[str, TypedSearchAttributes, RecoveryStart]:
    """One incident's workflow id, search attributes (as the workflow would have upserted them) and input."""
    cluster, category, mode = pick(rng, CLUSTERS), pick(rng, CATEGORIES), pick(rng, MODES)
    state = pick(rng, CLOSED_STATES if closed else OPEN_STATES)
    key = IncidentKey(cluster=cluster, job_id=str(4_000_000 + rng.randrange(JOBS)), job_attempt=i)
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(search.JOB_ID, key.job_id), SearchAttributePair(search.CLUSTER, cluster),
        SearchAttributePair(search.MODE, mode.value), SearchAttributePair(search.STATE, state.value)]
    if state != S.DETECTED:
        pairs.append(SearchAttributePair(search.CATEGORY, category.value))
        pairs.append(SearchAttributePair(search.PARTITION, pick(rng, PARTITIONS)))
        if category in HARDWARE:
            nodes = sorted({f"{cluster}-n{rng.randrange(NODES_PER_CLUSTER):04d}" for _ in range(rng.choice((1, 1, 2)))})
            pairs.append(SearchAttributePair(search.CULPRIT_NODES, nodes))
    if closed:
        pairs.append(SearchAttributePair(search.OUTCOME, state.value))
    return key.workflow_id, TypedSearchAttributes(pairs), RecoveryStart(key=key, policy=Policy(mode=mode))


@asynccontextmanager
async def shipped_server(tmp: Path) -> AsyncIterator[str]:
    """The dev server exactly as `goodput up` starts it (SQLite file, WAL), keeping the file's path."""
    port = free_port()
    proc = devserver.start(port=port, ui_port=None, db_file=tmp / "temporal.db", log_file=tmp / "temporal.log",
                           wal=True)
    try:
        await served(f"127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        devserver.stop(proc)


def db_bytes(tmp: Path) -> int:
    return sum(p.stat().st_size for p in tmp.glob("temporal.db*"))


async def populate(client: Client, n_open: int, n_closed: int, concurrency: int, budget_s: float,
                   seed: int) -> dict[str, Any]:
    """Open incidents first (all of them), then closed ones until the target or the time budget."""
    rng = random.Random(seed)
    deadline = time.monotonic() + budget_s
    done = {"open": 0, "closed": 0}
    picks: dict[str, Counter[str]] = {"job": Counter(), "node": Counter()}

    async def feed(closed: bool, n: int) -> None:
        """`concurrency` workers drain one lazy stream of incidents: a fixed number in flight."""
        todo = (incident(i + (n_open if closed else 0), closed, rng) for i in range(n))

        async def worker() -> None:
            for wf_id, attrs, start in todo:
                if time.monotonic() > deadline:
                    return
                handle = await client.start_workflow("RecoveryWorkflow", start, id=wf_id,
                                                     task_queue=NO_WORKER_QUEUE, search_attributes=attrs)
                if closed:
                    await handle.terminate(reason="console benchmark: a closed incident")
                done["closed" if closed else "open"] += 1
                picks["job"][attrs.get(search.JOB_ID) or ""] += 1
                for node in attrs.get(search.CULPRIT_NODES) or ():
                    picks["node"][node] += 1
                if (done["open"] + done["closed"]) % 5000 == 0:
                    print(f"  populated {done['open']} open, {done['closed']} closed", file=sys.stderr, flush=True)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    timings: dict[str, float] = {}
    for label, is_closed, n in (("open", False, n_open), ("closed", True, n_closed)):
        t0 = time.monotonic()
        await feed(is_closed, n)
        timings[label] = time.monotonic() - t0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:  # visibility is written asynchronously: wait until it has caught up
        closed = (await client.count_workflows(f"{BASE_QUERY} AND ExecutionStatus != 'Running'")).count
        running = (await client.count_workflows(f"{BASE_QUERY} AND ExecutionStatus = 'Running'")).count
        if closed >= done["closed"] and running >= done["open"]:
            break
        await asyncio.sleep(0.5)
    return {"open": running, "closed": closed, "target_open": n_open, "target_closed": n_closed,
            "budget_s": budget_s, "budget_exhausted": done["closed"] < n_closed or done["open"] < n_open,
            "concurrency": concurrency, "open_s": round(timings["open"], 1), "closed_s": round(timings["closed"], 1),
            "open_per_s": round(done["open"] / timings["open"], 1) if timings["open"] else None,
            "closed_per_s": round(done["closed"] / timings["closed"], 1) if timings["closed"] else None,
            "visibility_catch_up_s": round(time.monotonic() - t0, 2),
            "job": picks["job"].most_common(1)[0][0], "node": picks["node"].most_common(1)[0][0]}


def dist(values: Sequence[float]) -> dict[str, float]:
    """Milliseconds: p50 / p90 / max over the repetitions."""
    ms = [v * 1000 for v in values]
    return {"p50": round(percentile(ms, 50), 1), "p90": round(percentile(ms, 90), 1), "max": round(max(ms), 1),
            "n": len(ms)}


async def timed(fn: Callable[[], Awaitable[Any]], reps: int) -> tuple[list[float], Any]:
    out: list[float] = []
    last: Any = None
    for _ in range(reps):
        t0 = time.perf_counter()
        last = await fn()
        out.append(time.perf_counter() - t0)
    return out, last


async def list_raw(client: Client, query: str, limit: int) -> int:
    """The listing RPCs alone, no decoding of rows: the server's share of all()."""
    token, n = b"", 0
    while n < limit:
        resp = await client.workflow_service.list_workflow_executions(ListWorkflowExecutionsRequest(
            namespace=client.namespace, query=query, page_size=min(limit - n, 1000), next_page_token=token))
        n, token = n + len(resp.executions), resp.next_page_token
        if not token:
            break
    return n


async def measure(client: Client, pop: dict[str, Any], reps: int) -> dict[str, Any]:
    backend = ConsoleBackend(client, NO_WORKER_QUEUE)
    filters = {"no filter": IncidentFilter(), "state=awaiting-approval": IncidentFilter(state=S.AWAITING_APPROVAL),
               "open only": IncidentFilter(open_only=True), "one node": IncidentFilter(node=pop["node"]),
               "one job": IncidentFilter(job=pop["job"]),
               "category + since 24h": IncidentFilter(category=Category.GPU_HARDWARE, since="24h")}
    first: dict[str, Any] = {}
    for name, flt in filters.items():
        await backend.page(flt)  # one warm-up
        times, page = await timed(partial(backend.page, flt), reps)
        matching = (await client.count_workflows(visibility_query(flt, datetime.now(UTC)))).count
        first[name] = {**dist(times), "rows": len(page.rows), "matching": matching}

    deep: list[float] = []
    for _ in range(3):
        token = None
        for _ in range(10):
            t0 = time.perf_counter()
            page = await backend.page(IncidentFilter(), token)
            deep.append(time.perf_counter() - t0)
            token = page.next_token
            if token is None:
                break
    counts, found = await timed(lambda: backend.counts(IncidentFilter()), reps)
    counts_open, _ = await timed(lambda: backend.counts(IncidentFilter(open_only=True)), max(5, reps // 2))
    one_count, _ = await timed(lambda: client.count_workflows(BASE_QUERY), reps)
    cluster = max(CLUSTERS, key=CLUSTERS.__getitem__)
    overview, rows = await timed(lambda: backend.all(IncidentFilter(cluster=cluster, page_size=200), limit=2000), 5)
    inbox, waiting = await timed(lambda: backend.all(IncidentFilter(state=S.AWAITING_APPROVAL, open_only=True,
                                                                   page_size=200), limit=2000), 5)
    # What the fixes would cost: the same count queries concurrently, and one GROUP BY query.
    queries = [f"{BASE_QUERY} AND {search.STATE.name} = '{state.value}'" for state in IncidentState]
    parallel, _ = await timed(lambda: asyncio.gather(*(client.count_workflows(q) for q in queries)), reps)
    group_by: dict[str, Any] = {}
    for attr in (search.STATE.name, "ExecutionStatus"):
        try:
            times, _ = await timed(partial(client.count_workflows, f"{BASE_QUERY} GROUP BY {attr}"), reps)
            group_by[attr] = dist(times)
        except RPCError as err:
            group_by[attr] = {"refused": str(err)}
    raw, n_raw = await timed(partial(list_raw, client, visibility_query(IncidentFilter(cluster=cluster),
                                                                       datetime.now(UTC)), 2000), 5)
    return {"first_page": first, "ten_pages_deep": {**dist(deep), "page_size": 50},
            "counts_parallel": dist(parallel), "group_by": group_by,
            "all_2000_cluster_rpc_only": {**dist(raw), "rows": n_raw},
            "counts": {**dist(counts), "queries": len(found), "total": sum(found.values())},
            "counts_open_only": dist(counts_open), "one_count_query": dist(one_count),
            "all_2000_cluster": {**dist(overview), "rows": len(rows)},
            "all_2000_inbox": {**dist(inbox), "rows": len(waiting)}}


async def http(client: Client, tmp: Path, reps: int) -> dict[str, Any]:
    """GET /incidents through the served console (page + counts + rendering); refresh_s=0 turns off
    the fetch the console shares between browsers for one refresh period, so every GET is a fetch."""
    token = "bench-viewer-token-" + "v" * 20
    ctx = ConsoleContext(backend=ConsoleBackend(client, NO_WORKER_QUEUE),
                         auth=TokenAuthenticator((ConsoleUser(name="bench", role="viewer", token=token),), b"s" * 32),
                         policy=Policy(), cluster="prod-a", audit_path=tmp / "audit.jsonl",
                         temporal_ui_url="http://127.0.0.1:8233", namespace="default", refresh_s=0.0)
    out: dict[str, Any] = {}
    async with serve_console(ctx, ConsoleSettings(port=0), None) as served, \
            httpx.AsyncClient(base_url=served.url, headers={"authorization": f"Bearer {token}"},
                              timeout=60) as web:
        for path in ("/incidents", "/incidents?open=1"):
            await web.get(path)
            times, resp = await timed(partial(web.get, path), reps)
            out[path] = {**dist(times), "status": resp.status_code, "bytes": len(resp.content)}
    return out


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    measured = commit()  # now: the code imported above, whatever the tree becomes during the run
    load_start = round(os.getloadavg()[0], 2)  # the 2 cores are shared: how busy they were
    with tempfile.TemporaryDirectory(prefix="goodput-console-bench-") as raw:
        tmp = Path(raw)
        async with shipped_server(tmp) as address:
            client = await connect(address)
            pop = await populate(client, args.open, args.closed, args.concurrency, args.budget_s, args.seed)
            pop["db_mib"] = round(db_bytes(tmp) / 2**20, 1)
            print(f"  populated {pop['open']} open + {pop['closed']} closed; measuring", file=sys.stderr, flush=True)
            reads = await measure(client, pop, args.reps)
            web = {"skipped": "--no-http"} if args.no_http else await http(client, tmp, args.reps)
            pop["db_mib_after"] = round(db_bytes(tmp) / 2**20, 1)
    return {"commit": measured, "storage": "sqlite-wal (goodput up)", "population": pop, "backend": reads,
            "http": web, "environment": environment(),
            "load_avg_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)}}


def table(r: dict[str, Any]) -> None:
    p, b = r["population"], r["backend"]
    print(f"Recovery Console at scale, embedded dev server (SQLite + WAL), commit {r['commit']}")
    print(f"  population: {p['open']:,} open + {p['closed']:,} closed incidents (target {p['target_open']:,} + "
          f"{p['target_closed']:,}{', time budget ran out' if p['budget_exhausted'] else ''}); "
          f"database {p['db_mib']} MiB")
    print(f"  populate: open {p['open_per_s']}/s ({p['open_s']} s), closed (start+terminate) {p['closed_per_s']}/s "
          f"({p['closed_s']} s), {p['concurrency']} in flight")
    print(f"  {'read':<40} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}  note")
    rows: list[tuple[str, dict[str, Any], str]] = [
        (f"first page (50): {k}", v, f"{v['rows']} rows of {v['matching']:,}") for k, v in b["first_page"].items()]
    rows += [("next page, 10 deep (each)", b["ten_pages_deep"], ""),
             (f"counts(): {b['counts']['queries']} count queries", b["counts"], f"total {b['counts']['total']:,}"),
             ("  the same, run concurrently", b["counts_parallel"], ""),
             ("counts(open only)", b["counts_open_only"], ""),
             ("one count query (all incidents)", b["one_count_query"], ""),
             ("all(limit=2000), one cluster", b["all_2000_cluster"], f"{b['all_2000_cluster']['rows']} rows"),
             ("  its listing RPCs alone", b["all_2000_cluster_rpc_only"], ""),
             ("all(limit=2000), approval inbox", b["all_2000_inbox"], f"{b['all_2000_inbox']['rows']} rows")]
    rows += [(f"one count query GROUP BY {k}", v, "") for k, v in b["group_by"].items() if "p50" in v]
    rows += [(f"HTTP GET {k}", v, f"{v['bytes']:,} bytes") for k, v in r["http"].items() if isinstance(v, dict)]
    for name, d, note in rows:
        print(f"  {name:<40} {d['p50']:>8} {d['p90']:>8} {d['max']:>8}  {note}")
    for k, v in b["group_by"].items():
        if "refused" in v:
            print(f"  GROUP BY {k}: refused by the server ({v['refused']})")
    if "skipped" in r["http"]:
        print(f"  HTTP skipped: {r['http']['skipped']}")


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks console", description=__doc__.splitlines()[0])
    parser.add_argument("--open", type=int, default=2000)
    parser.add_argument("--closed", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--budget-s", type=float, default=1500.0, help="populate time budget (seconds)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_all(args))
    table(result)
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run()
