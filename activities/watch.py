"""The watchers as long-running, heartbeating activities.

`watch_job_logs` tails one job attempt's output files and feeds the live detector;
`watch_scheduler` diffs the scheduler's jobs and nodes every few seconds, reports bad endings and
dead nodes, and launches a log watcher for every opted-in job that starts running. Both heartbeat
their position (file cursors, the previous snapshot) so Temporal can move them to another worker
without losing or repeating anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters.job_scan import JobScanner
from activities.scheduler_calls import mapped
from goodput.detect.hang import ProgressState
from goodput.detect.live import LiveLogDetector, LiveState
from goodput.detect.log_marks import merge, replays
from goodput.detect.logtail import LogLine, LogTailer
from goodput.detect.nvrx_cycles import TAG as NVRX_TAG
from goodput.detect.scan_memory import MAX_REMEMBERED, of_scan
from goodput.detect.scheduler_watch import Snapshot, changes, new_running, snapshot
from goodput.detect.watch import (
    AnomalySink,
    ClusterCheckpoint,
    WatchCheckpoint,
    WatchClusterInput,
    WatchJobInput,
    WatchJobResult,
    WatchLauncher,
)
from goodput.models import IncidentKey
from goodput.scheduler import ACTIVE_JOB_STATES, Scheduler, SchedulerError
from goodput.untrusted_files import UnsafeFileError

log = logging.getLogger("goodput.watch")


def _poll_all(tailers: list[LogTailer], now: datetime, refused: list[str]) -> list[LogLine]:
    """New lines of every file; a file the job made unsafe (a symlink, a FIFO, someone else's
    file) is dropped from the watch with its reason, never read and never retried."""
    lines: list[LogLine] = []
    for tailer in list(tailers):
        try:
            lines.extend(tailer.poll(now))
        except UnsafeFileError as err:
            log.warning("not watching a job file: %s", err)
            refused.append(f"refused to read a job file: {err}")
            tailer.close()
            tailers.remove(tailer)
    return lines


async def _pause(seconds: float) -> None:
    """The wait between polls. A worker shutting down ends the watch at once, as a retryable
    failure (the watch resumes from its last heartbeat's checkpoint on the next worker), instead of
    holding the shutdown for its whole grace period: Ctrl-C on `goodput up` stops in seconds."""
    shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    try:
        done, _ = await asyncio.wait({shutdown}, timeout=seconds)
    finally:
        shutdown.cancel()
    if done:
        raise ApplicationError("the worker is shutting down; the watch resumes on the next one",
                               type="WorkerShutdown")


def _details(model: type[WatchCheckpoint] | type[ClusterCheckpoint]) -> object | None:
    details = activity.info().heartbeat_details
    return model.model_validate(details[0]) if details else None


class WatchActivities:
    def __init__(self, scheduler: Scheduler, sink: AnomalySink, launcher: WatchLauncher) -> None:
        self._scheduler = scheduler
        self._sink = sink
        self._launcher = launcher

    @activity.defn(name="watch_job_logs")
    async def watch_job_logs(self, request: WatchJobInput) -> WatchJobResult:
        job = request.job
        paths = request.paths
        if not paths or any("%" in p for p in paths):
            # Listings give the unexpanded --output pattern (slurm-%j.out); the job's detail has the file.
            with contextlib.suppress(ApplicationError):
                job = await mapped(self._scheduler.get_job(job.job_id))
                paths = request.model_copy(update={"job": job}).paths
        if not paths or any("%" in p for p in paths):
            return WatchJobResult(job_id=job.job_id, anomalies=0, reason="the job has no output files to watch")
        resumed = _details(WatchCheckpoint)
        checkpoint = resumed if isinstance(resumed, WatchCheckpoint) else WatchCheckpoint()
        initial = checkpoint.cursors or request.cursors
        after_unknown_attempt = False
        if not initial and resumed is None and job.restart_count > 0:
            # A requeued job may append to its predecessor's file: start where that watch stopped.
            initial = await self._launcher.handover(request.cluster, job.job_id, job.restart_count - 1,
                                                    wait_s=3 * request.job_check_interval_s)
            # No such watch (the attempt died before a scan saw it, or its watch never reported):
            # what the file holds was printed by earlier attempts. Read from its end, for an old
            # fatal line taken as this attempt's would start a second recovery of a recovered job.
            after_unknown_attempt = not initial
        cursors = {c.path: c for c in initial}
        key = IncidentKey(cluster=request.cluster, job_id=job.job_id, job_attempt=job.restart_count)
        node = job.nodes[0] if len(job.nodes) == 1 else None
        # A job that names its NVRx cycle-info directory runs under ft_launcher, which answers hangs in-job.
        state = checkpoint.live or LiveState(progress=ProgressState(started_at=request.started_at,
                                                                    launcher=NVRX_TAG in job.comment))
        if resumed is not None or activity.info().attempt > 1:
            # The last heartbeat may predate lines whose anomaly already went out: ask how far they go.
            delivered = merge([r.mark for r in state.replays], await self._launcher.delivered(key))
            state = state.model_copy(update={"replays": replays(delivered, initial)})
        detector = LiveLogDetector(key, state, node=node, hang=request.hang)
        # srun -l labels stay in the text: the catalogue reads them (rank and host context).
        tailers = [LogTailer(p, cursors.get(p), start_at_end=after_unknown_attempt, srun_labels=False,
                             owner_uid=job.user_id) for p in paths]
        refused: list[str] = []
        loop = asyncio.get_running_loop()
        next_check = loop.time() + request.job_check_interval_s
        try:
            while True:
                now = datetime.now(UTC)
                lines = _poll_all(tailers, now, refused)
                if not tailers:
                    return WatchJobResult(job_id=job.job_id, anomalies=detector.state.anomalies,
                                          reason="; ".join(refused))
                for anomaly in detector.feed(lines, now, datetime.now(UTC)) + detector.tick(now):
                    await self._sink.submit(anomaly)
                activity.heartbeat(WatchCheckpoint(cursors=tuple(t.cursor for t in tailers), live=detector.state))
                if loop.time() >= next_check:
                    next_check = loop.time() + request.job_check_interval_s
                    ended = await self._ended(key)
                    if ended:
                        # One last read: the lines a dying job printed last are often the cause.
                        now = datetime.now(UTC)
                        final = _poll_all(tailers, now, refused)
                        for anomaly in detector.feed(final, now, datetime.now(UTC)):
                            await self._sink.submit(anomaly)
                        return WatchJobResult(job_id=job.job_id, anomalies=detector.state.anomalies, reason=ended,
                                              cursors=tuple(t.cursor for t in tailers))
                await _pause(request.poll_interval_s)
        finally:
            for tailer in tailers:
                tailer.close()

    async def _ended(self, key: IncidentKey) -> str | None:
        try:
            job = await mapped(self._scheduler.get_job(key.job_id))
        except ApplicationError as err:  # a scheduler hiccup must not end the watch; an unknown job does
            if err.non_retryable:
                return f"job {key.job_id} is no longer known to the scheduler"
            log.warning("job check for %s failed: %s", key.job_id, err)
            return None
        if job.restart_count != key.job_attempt:
            return f"job {key.job_id} moved on to attempt {job.restart_count}"
        if job.state not in ACTIVE_JOB_STATES:
            return f"job {key.job_id} is {job.state}"
        return None

    @activity.defn(name="watch_scheduler")
    async def watch_scheduler(self, request: WatchClusterInput) -> None:
        resumed = _details(ClusterCheckpoint)
        checkpoint = resumed if isinstance(resumed, ClusterCheckpoint) else ClusterCheckpoint()
        previous = checkpoint.last_scan()
        scans = checkpoint.scans
        scanner = JobScanner(self._scheduler, request.opt_in.admits, refresh_every_s=request.refresh_records_s)
        while True:
            try:
                scan = await scanner.scan()
                nodes = await self._scheduler.list_dead_nodes()
            except SchedulerError as err:
                log.warning("scheduler scan of %s failed (will retry): %s", request.cluster, err)
                activity.heartbeat(checkpoint)
                await _pause(request.poll_interval_s)
                continue
            now = datetime.now(UTC)
            # timed, so that a node only NOT_RESPONDING counts once it has stayed so (scheduler_watch)
            current = snapshot(scan.jobs, nodes, at=now, previous=previous)
            watched = scan.watched
            if previous is not None:
                for anomaly in changes(previous, current, cluster=request.cluster, now=now, watched=watched,
                                       never_restart_exit_codes=request.never_restart_exit_codes):
                    await self._sink.submit(anomaly)
            for job in new_running(previous or Snapshot(), current, watched):
                await self._launcher.launch(WatchJobInput(
                    cluster=request.cluster, job=job, started_at=now, poll_interval_s=request.log_poll_interval_s,
                    hang=request.hang))
            # What a retry would resume from, also used here: one behaviour, retried or not.
            memory = of_scan(current, watched)
            if memory is None and scans == 0:
                log.warning("the cluster watcher of %s keeps its scans in memory only: more than %d watched "
                            "or ended jobs and dead nodes; a retry starts from a fresh baseline",
                            request.cluster, MAX_REMEMBERED)
            previous, scans = (current if memory is None else memory.snapshot()), scans + 1
            checkpoint = ClusterCheckpoint(memory=memory, scans=scans)
            activity.heartbeat(checkpoint)
            await _pause(request.poll_interval_s)
