"""The service's side of node liveness: the heartbeat endpoint and the monitor that opens node losses.

Agents POST a small JSON heartbeat to `/v1/heartbeat` every `agent.heartbeat_interval_s`. A
heartbeat is authenticated by its node's own token (an HMAC of the node's name under the
service's `liveness.secret_file`), so an agent can keep only its own node alive: it cannot
vouch for a node that is gone, nor silence another. Heartbeats go over HTTP rather than Temporal
(the agents' channel for anomalies) because a signal per node every two seconds would be
history in Temporal; the tracker holds only last-seen times, in this process's memory.

The monitor looks every `liveness.check_s`. It stats the output files of the opted-in running
jobs (listed every `jobs_refresh_s`, 5 s) to learn how often each writes, and weighs a suspect
node (its agent silent for `missed` intervals) with Slurm's node state and the output of the
jobs running on it (`goodput.detect.node_liveness.corroborate`); what is corroborated goes to the
incident sink as a node-failure anomaly, and a suspect without a second signal is only logged.
A controller that does not answer costs the Slurm signal only: the job list in hand and the
output files still count. After a restart of
this process every agent is unknown until it beats again, so a restart never reads as a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from activities.adapters.job_scan import JobScanner
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.node_liveness import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    JobOutput,
    LivenessConfig,
    LivenessTracker,
    OutputRhythm,
    SizeHistory,
    Suspect,
    corroborate,
)
from goodput.detect.stack_requests import StackRequestTable
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.identifiers import validate_cluster, validate_node_name
from goodput.models import Anomaly
from goodput.scheduler import JobInfo, JobState, NodeInfo, Scheduler
from goodput.untrusted_files import open_job_file
from workers.agent_requests import AgentRequestRefused, agent_json_body, refusal, require_node_token
from workers.gpu_feed import GpuFeedEndpoint
from workers.http_site import Listener, application
from workers.stack_requests import StackEndpoint

log = logging.getLogger("goodput.liveness")

HEARTBEAT_PATH = "/v1/heartbeat"
MAX_HEARTBEAT_BYTES = 1024
MIN_SECRET_BYTES = 32
MAX_SUBMITTED = 10_000


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LivenessSecretError(ValueError):
    """The heartbeat secret is missing, unreadable or too short."""


def read_secret(path: Path | None) -> bytes:
    if path is None:
        raise LivenessSecretError("liveness.enabled needs liveness.secret_file (at least 32 bytes)")
    try:
        secret = path.expanduser().read_bytes().strip()
    except OSError as err:
        raise LivenessSecretError(f"cannot read liveness.secret_file {path}: {err.strerror}") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise LivenessSecretError(f"liveness.secret_file {path} holds {len(secret)} bytes; at least "
                                  f"{MIN_SECRET_BYTES} are needed")
    return secret


class HeartbeatServer:
    """`POST /v1/heartbeat` (and `GET /healthz`): each authentic heartbeat goes to the tracker."""

    def __init__(self, config: LivenessConfig, tracker: LivenessTracker, cluster: str, secret: bytes, *,
                 clock: Callable[[], datetime] = _utcnow, routes: Sequence[BaseRoute] = (),
                 stacks: StackRequestTable | None = None) -> None:
        self.config = config
        self.cluster = validate_cluster(cluster)
        self._tracker = tracker
        self._secret = secret
        self._clock = clock
        self.rejected = 0
        # Stack requests ride on the heartbeat's response; their results come back to /v1/stacks.
        self.stacks = StackEndpoint(stacks, self.cluster, secret, clock) if stacks is not None else None
        # Further endpoints of the agents on the same listener and credential (the GPU feed, the stacks).
        extra = [*routes, *([self.stacks.route()] if self.stacks is not None else [])]
        self.app = application([Route(HEARTBEAT_PATH, self._heartbeat, methods=["POST"]), *extra])
        self._listener = Listener(self.app, "heartbeat server", config.host, config.port)

    @property
    def port(self) -> int:
        return self._listener.port

    @property
    def url(self) -> str:
        return self._listener.url

    async def start(self) -> None:
        if await self._listener.start():
            log.info("heartbeats at %s%s", self.url, HEARTBEAT_PATH)

    async def stop(self) -> None:
        await self._listener.stop()

    def _refuse(self, status: int, message: str) -> JSONResponse:
        self.rejected += 1
        return refusal(status, message)

    async def _heartbeat(self, request: Request) -> JSONResponse:
        try:
            body = await agent_json_body(request, MAX_HEARTBEAT_BYTES, "a heartbeat")
            try:
                beat = json.loads(body)
                if not isinstance(beat, dict):
                    raise ValueError("not a JSON object")
                node = validate_node_name(str(beat.get("node", "")))
                cluster = str(beat.get("cluster", ""))
                interval = float(beat.get("interval_s", 0))
                if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
                    raise ValueError(f"interval_s must be within {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g}")
            except (ValueError, TypeError, OverflowError, RecursionError) as err:
                raise AgentRequestRefused(400, f"bad heartbeat: {str(err)[:200]}") from err
            # The token is the node's own: a heartbeat speaks for the node its credential belongs to.
            require_node_token(request, self._secret, self.cluster, cluster, node)
        except AgentRequestRefused as refused:
            return self._refuse(refused.status, refused.message)
        was = self._tracker.last_seen(node)
        if not self._tracker.beat(node, self._clock(), interval):
            return self._refuse(503, "too many nodes tracked")
        if was is None:
            log.info("heartbeats from %s (every %g s)", node, interval)
        if self.stacks is None:
            return JSONResponse({"node": node})
        return JSONResponse({"node": node, "stacks": self.stacks.pending(node)})


def _outputs(job: JobInfo) -> list[tuple[str, datetime, int]]:
    """The job's stdout and stderr (regular files of the job's owner only): path, write time, size."""
    found = []
    for path in dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (job.user_id is None or st.st_uid == job.user_id):
            found.append((path, datetime.fromtimestamp(st.st_mtime, UTC), st.st_size))
    return found


def _read_from(path: str, owner: int | None, start: int, max_bytes: int) -> str:
    """What was appended to `path` since `start` (its last `max_bytes`), opened as a job file."""
    try:
        fd = open_job_file(path, owner_uid=owner)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        if size < start:  # truncated or replaced since: nothing known to be new
            return ""
        os.lseek(fd, max(start, size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


_Attempt = tuple[str, int]


class LivenessMonitor:
    """Learns each running job's output rhythm, weighs suspect nodes with Slurm's node state and
    their jobs' output, and submits the node losses that are corroborated."""

    def __init__(self, config: LivenessConfig, tracker: LivenessTracker, scheduler: Scheduler, sink: AnomalySink,
                 cluster: str, opt_in: OptInRule, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.config, self._tracker, self._scheduler, self._sink = config, tracker, scheduler, sink
        self.cluster, self._opt_in, self._clock = cluster, opt_in, clock
        self._jobs: list[JobInfo] = []
        self._jobs_at: datetime | None = None
        # a line per job each refresh, the records of the jobs it may watch only when needed (#29)
        self._scanner = JobScanner(scheduler, opt_in.admits)
        self._rhythms: dict[_Attempt, OutputRhythm] = {}
        self._sizes: dict[tuple[_Attempt, str], SizeHistory] = {}
        self._submitted: OrderedDict[str, None] = OrderedDict()
        self._note = ""
        self._last_error = ""
        self.errors = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check()
            except Exception as err:  # the sink failing must not end node-loss detection; retried next time
                self._failed("node liveness check", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.check_s)

    def _failed(self, what: str, err: Exception) -> None:
        """Counted every time, logged once per new error (not every second while slurmctld is down)."""
        self.errors += 1
        text = f"{what}: {type(err).__name__}: {err}"
        if text != self._last_error:
            log.warning("%s failed: %s", what, err, exc_info=not isinstance(err, OSError | TimeoutError))
        self._last_error = text

    async def _refresh_jobs(self, now: datetime) -> None:
        if self._jobs_at is not None and (now - self._jobs_at).total_seconds() < self.config.jobs_refresh_s:
            return
        self._jobs_at = now  # a failed list is retried at the next period, the last list kept meanwhile
        self._jobs = [j for j in (await self._scanner.scan()).watched.values() if j.state is JobState.RUNNING]
        current = {(j.job_id, j.restart_count) for j in self._jobs}
        self._rhythms = {k: r for k, r in self._rhythms.items() if k in current}
        self._sizes = {k: h for k, h in self._sizes.items() if k[0] in current}

    def _observe(self) -> None:
        """One stat per job output file: the rhythm that says whether a quiet job has stopped."""
        for job in self._jobs:
            files = _outputs(job)
            if not files:
                continue
            key = (job.job_id, job.restart_count)
            for path, when, size in files:
                self._sizes[key, path] = self._sizes.get((key, path), SizeHistory()).observe(when, size)
            written = max(when for _, when, _ in files)
            rhythm = self._rhythms.get(key)
            self._rhythms[key] = OutputRhythm(written_at=written) if rhythm is None else rhythm.observe(written)

    async def check(self) -> list[Anomaly]:
        """One look; returns the anomalies submitted."""
        now = self._clock()
        verdict = self._tracker.verdict(now)
        note = verdict.note()
        if note != self._note:
            (log.warning if note else log.info)("%s", note or "every agent heard again")
            self._note = note
        try:
            await self._refresh_jobs(now)
        except Exception as err:  # the controller down: the jobs listed last are still running somewhere
            self._failed("listing jobs", err)
        await asyncio.to_thread(self._observe)
        if not verdict.suspects or verdict.suspended:
            return []
        hit = {s.node for s in verdict.suspects}
        if not any(hit & set(j.nodes) for j in self._jobs):
            return []
        nodes = await self._read_nodes(sorted(hit & {n for j in self._jobs for n in j.nodes}))
        out = []
        for suspect in verdict.suspects:
            on_node = [j for j in self._jobs if suspect.node in j.nodes]
            out += await self._weigh(suspect, nodes.get(suspect.node), on_node)
        return out

    async def _read_nodes(self, names: Sequence[str]) -> dict[str, NodeInfo]:
        """Slurm's record of each suspect node that runs a watched job: those nodes, read together
        (the CLI sends one `scontrol show node` for them), not the whole cluster (#29). A node that
        cannot be read gives no Slurm signal this time; its output and peers still count."""
        read = await asyncio.gather(*(self._scheduler.get_node(name) for name in names), return_exceptions=True)
        nodes: dict[str, NodeInfo] = {}
        for name, node in zip(names, read, strict=True):
            if isinstance(node, BaseException):
                if not isinstance(node, Exception):
                    raise node  # a cancellation, not a failed read
                self._failed(f"reading node {name}", node)
            else:
                nodes[name] = node
        return nodes

    def _output(self, job: JobInfo, suspect: Suspect) -> JobOutput:
        rhythm = self._rhythms.get((job.job_id, job.restart_count))
        if rhythm is None:
            return JobOutput(job=job)
        written = rhythm.written_at
        tails = []
        if written > suspect.last_seen:
            for path in dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p):
                history = self._sizes.get(((job.job_id, job.restart_count), path))
                start = history.offset_at(suspect.last_seen) if history is not None else None
                if start is not None:
                    tails.append(_read_from(path, job.user_id, start, self.config.max_tail_bytes))
        tail = "\n".join(tails)
        return JobOutput(job=job, written_at=written, max_gap_s=rhythm.max_gap_s, tail=tail)

    async def _weigh(self, suspect: Suspect, node: NodeInfo | None, jobs: Sequence[JobInfo]) -> list[Anomaly]:
        if not jobs:
            return []
        outputs = await asyncio.to_thread(lambda: [self._output(j, suspect) for j in jobs])
        submitted = []
        for anomaly in corroborate(suspect, cluster=self.cluster, node=node, outputs=outputs, now=self._clock(),
                                   config=self.config):
            if anomaly.id in self._submitted:
                continue
            await self._sink.submit(anomaly)
            log.warning("node loss on %s for job %s: %s", suspect.node, anomaly.job_id, "; ".join(anomaly.evidence))
            self._submitted[anomaly.id] = None
            while len(self._submitted) > MAX_SUBMITTED:
                self._submitted.popitem(last=False)
            submitted.append(anomaly)
        return submitted


@contextlib.asynccontextmanager
async def serve_liveness(config: LivenessConfig, scheduler: Scheduler, sink: AnomalySink, cluster: str,
                         opt_in: OptInRule, *, gpu_samples: GpuSampleStore | None = None,
                         stacks: StackRequestTable | None = None) -> AsyncIterator[HeartbeatServer]:
    """The heartbeat endpoint (with the GPU feed's, given a store, and `/v1/stacks`, given a request
    table) and the monitor, until the block ends."""
    tracker = LivenessTracker(config)
    secret = read_secret(config.secret_file)
    routes = [GpuFeedEndpoint(gpu_samples, cluster, secret).route()] if gpu_samples is not None else []
    server = HeartbeatServer(config, tracker, cluster, secret, routes=routes, stacks=stacks)
    monitor = LivenessMonitor(config, tracker, scheduler, sink, cluster, opt_in)
    stop = asyncio.Event()
    await server.start()
    task = asyncio.create_task(monitor.run(stop))
    try:
        yield server
    finally:
        stop.set()
        await task
        await server.stop()
