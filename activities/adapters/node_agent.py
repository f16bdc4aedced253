"""The node agent's loop: probe the GPUs, read the kernel log, and submit what `agent_step` finds.

It runs on every GPU node (`goodput agent`), because NVML and the kernel log are only readable
there. The loop must outlive everything it reads: a probe that raises or hangs (NVML can block
on a GPU that is falling off the bus, exactly when its Xid matters), a kernel log that is rotated
or unreadable, a scheduler or Temporal that is unreachable. Each source is guarded on its own and
counted in `AgentStats`; the kernel log keeps working while NVML hangs. Progress (the kernel-log
cursor, what was reported, what is still to be sent) goes to a small JSON state file only after
the step that consumed it, so a restarted agent neither repeats nor misses an Xid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from activities.adapters.agent_probe import probe_from
from activities.adapters.gpu_feed import GpuFeedSender
from activities.adapters.gpu_nvml import NvmlUnavailableError
from activities.adapters.heartbeat import HeartbeatSender, read_token
from activities.adapters.job_scan import JobScanner
from activities.adapters.kernel_log import KernelLog
from activities.adapters.node_jobs import NodeJobs
from activities.adapters.stack_agent import StackResponder
from goodput.detect.gpu import GpuProbe, GpuSample, XidEvent
from goodput.detect.kernel_origin import KernelLogRefusedError, check_kernel_log
from goodput.detect.logtail import TailCursor
from goodput.detect.node_agent import AgentCheckpoint, AgentConfig, NodeAgentState, agent_step
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.identifiers import validate_cluster, validate_node_name
from goodput.models import Anomaly
from goodput.scheduler import JobInfo, Scheduler

log = logging.getLogger("goodput.agent")
__all__ = ["AgentStats", "KernelLogRefusedError", "NodeAgent", "probe_from", "resolve_node", "run_agent"]
MAX_PENDING_XIDS = 10_000
MAX_OUTBOX = 1_000
SUBMIT_TIMEOUT_S = 30.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class AgentStats:
    """Counters for tests and a status line; errors never stop the loop, so they must be visible."""

    ticks: int = 0
    steps: int = 0
    probe_errors: int = 0
    probe_timeouts: int = 0
    kernel_errors: int = 0
    kernel_xids: int = 0
    kernel_untrusted: int = 0
    scheduler_errors: int = 0
    sink_errors: int = 0
    state_errors: int = 0
    step_errors: int = 0
    submitted: int = 0


def resolve_node(config: AgentConfig) -> str:
    """Slurm's NodeName is usually the short hostname; `node` overrides it where it is not."""
    return validate_node_name(config.node or socket.gethostname().split(".")[0])


class _ErrorLog:
    """A failing source logs a warning when it starts failing or the error changes, not every tick."""

    def __init__(self) -> None:
        self._last: dict[str, str] = {}

    def failed(self, source: str, err: BaseException) -> None:
        text = f"{type(err).__name__}: {err}"
        if self._last.get(source) != text:
            log.warning("%s failed: %s", source, text)
        else:
            log.debug("%s failed again: %s", source, text)
        self._last[source] = text

    def ok(self, source: str) -> None:
        if self._last.pop(source, None) is not None:
            log.info("%s works again", source)


class NodeAgent:
    """One node's agent; `run(stop)` loops until `stop` is set."""

    def __init__(self, node: str, cluster: str, probe: GpuProbe | None, kernel_log: Path | None,
                 scheduler: Scheduler, sink: AnomalySink, opt_in: OptInRule, interval_s: float = 2.0,
                 job_refresh_s: float = 10.0, *, state_file: Path | None = None,
                 xid_max_age_s: float = AgentConfig().xid_max_age_s,
                 probe_timeout_s: float = AgentConfig().probe_timeout_s,
                 kernel_log_accept_mixed: bool = False, heartbeat: HeartbeatSender | None = None,
                 gpu_feed: GpuFeedSender | None = None, clock: Callable[[], datetime] = _utcnow,
                 node_jobs: NodeJobs | None = None) -> None:
        self.node = validate_node_name(node)
        self.cluster = validate_cluster(cluster)
        self._probe = probe
        self._kernel_path = kernel_log
        self._accept_mixed = kernel_log_accept_mixed
        self._scheduler = scheduler
        self._sink = sink
        self._opt_in = opt_in
        self._interval = interval_s
        self._job_refresh = job_refresh_s
        self._state_file = state_file
        self._xid_max_age = xid_max_age_s
        self._probe_timeout = probe_timeout_s
        self._clock = clock
        self.heartbeat = heartbeat
        self.gpu_feed = gpu_feed
        self._samples: tuple[int, Sequence[GpuSample]] = (0, ())  # the latest read, by tick, for the feed
        self.stats = AgentStats()
        self._errors = _ErrorLog()
        self._state = NodeAgentState()
        self._outbox: list[Anomaly] = []
        self._cursor: TailCursor | None = None
        self._kernel: KernelLog | None = None
        self._pending_probe: list[XidEvent] = []
        self._pending_kernel: list[XidEvent] = []
        self._pending_cursor: TailCursor | None = None
        self._jobs: list[JobInfo] | None = None
        # this node's jobs only (#29): from its own slurmd where given (`node_jobs`), the controller
        # asked only for records; else the controller's lines of this node, a record per new job
        self._node_jobs = node_jobs
        self._scanner = JobScanner(scheduler, opt_in.admits, node=self.node) if node_jobs is None else None
        self._jobs_task: asyncio.Task[Sequence[JobInfo]] | None = None
        self._next_refresh = 0.0
        # Loop times: when the list in hand was asked for, and when the oldest unstepped Xid was read.
        self._jobs_asked_at = self._list_started_at = float("-inf")
        self._xids_read_at: float | None = None
        self._probe_task: asyncio.Task[tuple[list[GpuSample], list[XidEvent]]] | None = None
        self._written: AgentCheckpoint | None = None

    # -- loop -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        if self._kernel_path is not None:  # before anything else: a forgeable source must not run at all
            survey = check_kernel_log(self._kernel_path, accept_mixed=self._accept_mixed)
            if survey.mixed:
                log.error("reading kernel log %s although %s (agent.kernel_log_accept_mixed = true)",
                          self._kernel_path, survey.describe())
        self._load()
        if self._kernel_path is not None:
            self._kernel = KernelLog(self._kernel_path, self._cursor, self.node, accept_mixed=self._accept_mixed)
        log.info("node agent on %s (cluster %s): probe %s, kernel log %s, every %gs", self.node, self.cluster,
                 type(self._probe).__name__ if self._probe else "none", self._kernel_path or "none",
                 self._interval)
        beats = asyncio.create_task(self.heartbeat.run(stop)) if self.heartbeat is not None else None
        feed = asyncio.create_task(self.gpu_feed.run(stop, lambda: self._samples)) if self.gpu_feed else None
        try:
            while not stop.is_set():
                await self.tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._interval)
        finally:
            for task in (self._probe_task, self._jobs_task, beats, feed):
                if task is not None:
                    task.cancel()
            if self._kernel is not None:
                self._kernel.close()
            self._persist()

    async def tick(self) -> None:
        """One round: read every source, then step and submit once the node's jobs are known."""
        self.stats.ticks += 1
        now = self._clock()
        self._read_kernel(now)  # first: it is the source that still answers when NVML hangs
        samples, polled = await self._read_probe()
        if samples:
            self._samples = (self.stats.ticks, samples)
        self._pending_probe = [*self._pending_probe, *polled][-MAX_PENDING_XIDS:]
        loop_now = asyncio.get_running_loop().time()
        if (self._pending_kernel or self._pending_probe) and self._xids_read_at is None:
            self._xids_read_at = loop_now
        await self._refresh_jobs(newer_than=self._xids_read_at)
        if self._jobs is None:
            return  # an Xid taken as "no job here" would be lost for good; keep it until we know
        if self._list_predates_xids(loop_now):
            return  # a job started since that list would miss its Xid; a newer list is on its way
        try:
            self._state, anomalies = agent_step(
                self._state, node=self.node, cluster=self.cluster, samples=samples,
                xid_events=self._pending_probe, kernel_xids=self._pending_kernel, jobs_on_node=self._jobs,
                now=now, opt_in=self._opt_in, xid_max_age_s=self._xid_max_age)
        except Exception:  # a bug or a poisonous event: drop this round's events rather than wedge forever
            self.stats.step_errors += 1
            log.exception("agent step failed; dropping %d Xid events",
                          len(self._pending_probe) + len(self._pending_kernel))
            anomalies = []
        self.stats.steps += 1
        self._pending_probe, self._pending_kernel, self._xids_read_at = [], [], None
        if self._pending_cursor is not None:
            self._cursor = self._pending_cursor
        if self._state.unattributed:
            log.debug("no opted-in job running on %s for: %s", self.node, "; ".join(self._state.unattributed))
        for anomaly in anomalies:
            log.info("%s: %s for job %s attempt %s", self.node, anomaly.id, anomaly.job_id, anomaly.job_attempt)
        self._outbox = [*self._outbox, *anomalies]
        if len(self._outbox) > MAX_OUTBOX:
            log.error("outbox over %d anomalies; dropping the oldest %d", MAX_OUTBOX, len(self._outbox) - MAX_OUTBOX)
            self._outbox = self._outbox[-MAX_OUTBOX:]
        await self._flush()
        self._persist()

    # -- sources --------------------------------------------------------------------------

    async def _read_probe(self) -> tuple[list[GpuSample], list[XidEvent]]:
        """A probe still busy from an earlier tick is waited for, never started twice (threads pile up)."""
        if self._probe is None:
            return [], []
        if self._probe_task is None:
            self._probe_task = asyncio.create_task(self._probe_once(self._probe))
            await asyncio.wait({self._probe_task}, timeout=self._probe_timeout)
        if not self._probe_task.done():  # hung since an earlier tick: do not hold up the kernel log again
            self.stats.probe_timeouts += 1
            self._errors.failed("GPU probe", TimeoutError(f"no answer within {self._probe_timeout:g}s"))
            return [], []
        task, self._probe_task = self._probe_task, None
        return task.result()

    async def _probe_once(self, probe: GpuProbe) -> tuple[list[GpuSample], list[XidEvent]]:
        samples: list[GpuSample] = []
        events: list[XidEvent] = []
        try:
            samples = list(await probe.sample())
            self._errors.ok("GPU probe")
        except Exception as err:  # any failure of a driver or exporter: count it, keep looping
            self.stats.probe_errors += 1
            self._errors.failed("GPU probe", err)
        try:
            events = list(await probe.poll_xid_events(0))
            self._errors.ok("GPU Xid poll")
        except Exception as err:
            self.stats.probe_errors += 1
            self._errors.failed("GPU Xid poll", err)
        return samples, events

    def _read_kernel(self, now: datetime) -> None:
        if self._kernel is None:
            return
        try:
            events = self._kernel.poll(now)
            self._errors.ok("kernel log")
        except Exception as err:  # unreadable, rotated away, a line we choke on: count it, keep looping
            self.stats.kernel_errors += 1
            self._errors.failed("kernel log", err)
            return
        self.stats.kernel_xids += len(events)
        if self._kernel.reader.untrusted > self.stats.kernel_untrusted:
            log.error("%d Xid line(s) in %s not believed: not written by the kernel%s", self._kernel.reader.untrusted
                      - self.stats.kernel_untrusted, self._kernel_path, " (the file mixes facilities, so its "
                      "'kernel:' lines prove nothing)" if self._kernel.reader.mixed else "")
            self.stats.kernel_untrusted = self._kernel.reader.untrusted
        self._pending_kernel = [*self._pending_kernel, *events][-MAX_PENDING_XIDS:]
        self._pending_cursor = self._kernel.cursor

    def _list_predates_xids(self, loop_now: float) -> bool:
        """Xids wait for a job list asked for after they were read, for at most one refresh period
        (then a stale list beats holding a GPU fault back while the controller is down)."""
        read_at = self._xids_read_at
        return read_at is not None and self._jobs_asked_at < read_at and loop_now - read_at < self._job_refresh

    async def _refresh_jobs(self, newer_than: float | None = None) -> None:
        """Jobs are listed in the background: a slow controller must not stall the GPU and log reads.
        A list older than `newer_than` (an Xid's read time) is refreshed now, not at the next period."""
        loop = asyncio.get_running_loop()
        stale = newer_than is not None and self._jobs_asked_at < newer_than
        if self._jobs_task is None and (loop.time() >= self._next_refresh or stale):
            self._list_started_at = loop.time()
            # an Xid is weighed against the controller's own word on who runs here
            self._jobs_task = asyncio.create_task(self._list_jobs(from_controller=stale or self._jobs is None))
        if self._jobs_task is None:
            return
        if self._jobs is None or stale:  # nothing known yet, or an Xid waits: worth one interval
            await asyncio.wait({self._jobs_task}, timeout=self._interval)
        if not self._jobs_task.done():
            return
        task, self._jobs_task = self._jobs_task, None
        self._next_refresh = loop.time() + self._job_refresh
        try:
            jobs = task.result()
        except Exception as err:  # keep the last known list: a stale list beats forgetting every job
            self.stats.scheduler_errors += 1
            self._errors.failed("scheduler job scan", err)
            return
        self._errors.ok("scheduler job scan")
        self._jobs = [job for job in jobs if self.node in job.nodes]
        self._jobs_asked_at = self._list_started_at

    async def _list_jobs(self, *, from_controller: bool) -> Sequence[JobInfo]:
        if self._node_jobs is not None:
            return await self._node_jobs.scan(from_controller=from_controller)
        assert self._scanner is not None  # built exactly when there is no node_jobs
        return (await self._scanner.scan()).jobs

    # -- output ---------------------------------------------------------------------------

    async def _flush(self) -> None:
        """Submit in order; what fails stays in the outbox (and the state file) for the next tick."""
        while self._outbox:
            anomaly = self._outbox[0]
            try:
                await asyncio.wait_for(self._sink.submit(anomaly), SUBMIT_TIMEOUT_S)
            except Exception as err:  # the incident ids dedupe, so a retry after a lost reply is safe
                self.stats.sink_errors += 1
                self._errors.failed("anomaly sink", err)
                return
            self._errors.ok("anomaly sink")
            self._outbox.pop(0)
            self.stats.submitted += 1

    def _checkpoint(self) -> AgentCheckpoint:
        # Samples change every tick; leaving them out keeps the file from being rewritten every tick.
        state = self._state.model_copy(update={"previous": (), "unattributed": ()})
        return AgentCheckpoint(state=state, kernel_cursor=self._cursor, outbox=tuple(self._outbox))

    def _load(self) -> None:
        if self._state_file is None or not self._state_file.exists():
            return
        try:
            checkpoint = AgentCheckpoint.model_validate_json(self._state_file.read_bytes())
        except (OSError, ValueError) as err:
            self.stats.state_errors += 1
            log.warning("ignoring unreadable agent state %s (%s); starting fresh", self._state_file, err)
            return
        self._state, self._cursor, self._outbox = checkpoint.state, checkpoint.kernel_cursor, list(checkpoint.outbox)
        self._written = checkpoint

    def _persist(self) -> None:
        if self._state_file is None:
            return
        checkpoint = self._checkpoint()
        if checkpoint == self._written:
            return
        tmp = self._state_file.with_name(self._state_file.name + ".tmp")
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(checkpoint.model_dump_json())
            os.replace(tmp, self._state_file)
        except OSError as err:
            self.stats.state_errors += 1
            self._errors.failed(f"writing {self._state_file}", err)
            return
        self._written = checkpoint


async def run_agent(config: AgentConfig, cluster: str, scheduler: Scheduler, sink: AnomalySink,
                    stop: asyncio.Event, *, opt_in: OptInRule | None = None) -> None:
    """`goodput agent`: resolve the node, open the probe, loop until `stop`.

    Without NVML (no driver, no GPU visible) the agent still reads the kernel log if one is
    configured, since that is the one source that survives a GPU falling off the bus.
    """
    node = resolve_node(config)
    heartbeat = gpu_feed = stacks = None
    if config.heartbeat_url:
        if config.heartbeat_token_file is None:
            raise ValueError("agent.heartbeat_url needs agent.heartbeat_token_file")
        token = read_token(config.heartbeat_token_file)
        stacks = StackResponder(config.heartbeat_url, token, cluster=cluster, node=node)
        heartbeat = HeartbeatSender(config.heartbeat_url, token, cluster=cluster, node=node,
                                    interval_s=config.heartbeat_interval_s, on_response=stacks.take)
        if config.gpu_feed_every and config.probe != "none":
            gpu_feed = GpuFeedSender(config.heartbeat_url, token, cluster=cluster, node=node,
                                     interval_s=config.heartbeat_interval_s * config.gpu_feed_every)
    async with contextlib.AsyncExitStack() as stack:
        probe: GpuProbe | None = None
        try:
            probe = await stack.enter_async_context(probe_from(config.probe, config.dcgm_url, node=node))
        except NvmlUnavailableError as err:
            if config.kernel_log is None:
                raise
            log.error("%s; reading the kernel log only", err)
        rule = opt_in or OptInRule()
        node_jobs = NodeJobs(scheduler, node, admits=rule.admits) if config.jobs_from == "slurmd" else None
        agent = NodeAgent(node, cluster, probe, config.kernel_log, scheduler, sink, rule,
                          config.interval_s, config.job_refresh_s, state_file=config.state_file,
                          xid_max_age_s=config.xid_max_age_s, probe_timeout_s=config.probe_timeout_s,
                          kernel_log_accept_mixed=config.kernel_log_accept_mixed, heartbeat=heartbeat,
                          gpu_feed=gpu_feed, node_jobs=node_jobs)
        if stacks is not None:
            stack.push_async_callback(stacks.close)
        await agent.run(stop)
