"""The node agent's rules: what one GPU node's samples and Xids mean for the jobs running on it.

The agent on each GPU node reads NVML (or a DCGM scrape) and the kernel log every few seconds.
Turning that into anomalies has traps that are easy to get wrong inside an I/O loop, so they live
here, pure and tested: only critical findings become anomalies (attribution drains on
gpu-hardware and straggler, so a warning-level hint must not open an incident), a finding belongs
to the opted-in job attempts running on the node at the time, the same Xid arriving from two
sources or twice from one source is reported once, and a condition that persists (a lost GPU is
lost on every sample) is reported once per job attempt rather than every two seconds. No clock
reads, no I/O: the caller passes `now` and does the logging.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from goodput.detect.gpu import GpuFinding, GpuSample, XidEvent, normalize_pci_bus_id
from goodput.detect.gpu_rules import evaluate
from goodput.detect.logtail import TailCursor
from goodput.detect.watch import OptInRule
from goodput.models import Anomaly, Frozen
from goodput.scheduler import JobInfo, JobState

ProbeKind = Literal["nvml", "dcgm", "none"]
DEFAULT_XID_MAX_AGE_S = 600.0
MAX_SEEN_XIDS = 4096
"""An application spinning on Xid 13 can log thousands; the digest memory must stay small."""


class AgentConfig(BaseModel):
    """Settings of `goodput agent` (the `agent` table of goodput.toml, `GOODPUT_AGENT__*`)."""

    model_config = ConfigDict(extra="forbid")

    node: str = ""
    """The Slurm node name; empty means this host's short name (resolved by the caller)."""
    probe: ProbeKind = "nvml"
    dcgm_url: str = "http://127.0.0.1:9400/metrics"
    kernel_log: Path | None = None
    """A file `journalctl -k -f -o export` appends to (only `_TRANSPORT=kernel` records count), a
    `dmesg -w` dump, or a kern.log only the kernel facility feeds; None reads no kernel log. A file
    that mixes facilities (/var/log/messages) is refused: anyone could write an Xid into it."""
    kernel_log_accept_mixed: bool = False
    """Read a kernel log that mixes facilities anyway, believing its `kernel:` lines: any local
    account's `logger -t kernel` can then drain the node. `goodput doctor` reports it."""
    interval_s: float = Field(default=2.0, gt=0)
    job_refresh_s: float = Field(default=10.0, gt=0)
    jobs_from: Literal["slurmd", "controller"] = "slurmd"
    """Where the agent learns which jobs run on its node. `slurmd`: the node's own slurmd lists their
    processes (`scontrol listpids`), and the controller is asked only for a job's record when its
    processes appear, change or go, and once a minute; `controller`: the controller's job list of
    the node every `job_refresh_s`, which costs slurmctld the whole cluster's list each time
    (`squeue --nodelist` filters on the client). `slurmd` falls back to it while the node cannot answer."""
    state_file: Path | None = None
    """Where the kernel-log cursor and what was reported survive a restart; None keeps them in memory."""
    xid_max_age_s: float = Field(default=DEFAULT_XID_MAX_AGE_S, gt=0)
    """A timestamped Xid older than this (a backlog read after downtime) is not pinned on today's jobs."""
    probe_timeout_s: float = Field(default=10.0, gt=0)
    """NVML can block on a failing GPU; past this the loop goes on with the kernel log alone."""
    heartbeat_url: str = Field(default="", pattern=r"^(https?://[^\s/]+(/\S*)?)?$")
    """The service's heartbeat endpoint (`liveness.host`/`port`, e.g. http://head:8789); empty sends none."""
    heartbeat_token_file: Path | None = None
    """This node's own token (`goodput agent-token --node NAME` on the service's host)."""
    heartbeat_interval_s: float = Field(default=2.0, ge=0.1, le=60.0)
    """The service calls the node suspect after `liveness.missed` (3) of these without a heartbeat."""
    gpu_feed_every: int = Field(default=5, ge=0, le=1000)
    """Send the GPUs' latest samples to the service (`/v1/gpu-samples`) every this many heartbeat
    intervals (10 s at the default 2 s); 0 sends none. Hang evidence judges the last 30 s (three
    reports) and stragglers compare the latest report, so 10 s keeps both well inside the 60 s a hang
    and the 120 s a straggler are to be named in, at about 2 KiB per node per report."""


class SeenXid(Frozen):
    digest: str
    at: datetime


class ReportedAttempt(Frozen):
    job_id: str
    attempt: int
    anomaly_ids: tuple[str, ...] = ()


class NodeAgentState(Frozen):
    """What one step hands the next (and, less `previous`, what a restart resumes from)."""

    previous: tuple[GpuSample, ...] = ()
    """The last samples, so that lifetime ECC counters count only when they grow."""
    seen_xids: tuple[SeenXid, ...] = ()
    """Xid events already handled (reported or not), so a re-read event is not pinned on a later job."""
    reported: tuple[ReportedAttempt, ...] = ()
    """Anomaly ids already submitted, per job attempt still on the node."""
    unattributed: tuple[str, ...] = ()
    """Actionable findings of the last step that no opted-in running job could take (for a debug log)."""


class AgentCheckpoint(Frozen):
    """The agent's state file: resume the kernel log where it stood and resend what was not sent."""

    state: NodeAgentState = Field(default_factory=NodeAgentState)
    kernel_cursor: TailCursor | None = None
    outbox: tuple[Anomaly, ...] = ()


def xid_digest(event: XidEvent, node: str) -> str:
    """GPU + code + time: NVML hands the same event out twice (poll and sample), both coalesce here."""
    gpu = (normalize_pci_bus_id(event.pci_bus_id) if event.pci_bus_id else None) or event.uuid or (
        f"gpu{event.gpu_index}" if event.gpu_index is not None else "gpu?")
    when = event.observed_at.isoformat() if event.observed_at else ""
    key = "\0".join([node, gpu, str(event.code), when])
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def probe_xids(samples: Iterable[GpuSample], polled: Iterable[XidEvent]) -> list[XidEvent]:
    """The probe's Xid events: those it polled plus those riding on its samples.

    NVML attaches to a sample the events it drained while sampling (they are not polled again),
    so those count. DCGM attaches its *last* Xid gauge to every scrape; only its scraper's
    `poll_xid_events` knows which of those are new, so DCGM's sample-borne events are ignored.
    """
    carried = [e for s in samples for e in s.xid_events if e.source != "dcgm"]
    return [*polled, *carried]


def _same_gpu(finding: GpuFinding, sample: GpuSample) -> bool:
    if finding.uuid and sample.uuid:
        return finding.uuid == sample.uuid
    if finding.pci_bus_id and sample.pci_bus_id:
        return normalize_pci_bus_id(finding.pci_bus_id) == normalize_pci_bus_id(sample.pci_bus_id)
    return finding.gpu_index is not None and finding.gpu_index == sample.index


def _targets(finding: GpuFinding, samples: Sequence[GpuSample], running: Sequence[JobInfo]) -> list[JobInfo]:
    """A GPU fault hits every job on the node, unless DCGM's hpc_job label says whose GPU it is."""
    labelled = {job for s in samples if _same_gpu(finding, s) for job in s.job_ids}
    named = [j for j in running if j.job_id in labelled]
    return named or list(running)


def _observed(finding: GpuFinding, events: Sequence[XidEvent], samples: Sequence[GpuSample],
              now: datetime) -> datetime:
    if finding.xid is not None:
        times = [e.observed_at for e in events if e.code == finding.xid and e.observed_at is not None]
        if times:
            return min(times)
    times = [s.observed_at for s in samples if s.observed_at is not None]
    return max(times) if times else now


def agent_step(state: NodeAgentState, *, node: str, cluster: str, samples: Sequence[GpuSample],
               xid_events: Sequence[XidEvent], kernel_xids: Sequence[XidEvent],
               jobs_on_node: Sequence[JobInfo], now: datetime, opt_in: OptInRule,
               xid_max_age_s: float = DEFAULT_XID_MAX_AGE_S) -> tuple[NodeAgentState, list[Anomaly]]:
    """One round of the agent: new state and the anomalies to submit (each at most once).

    `xid_events` are what the probe's `poll_xid_events` returned; `kernel_xids` come from the
    kernel log. Samples and events are renamed to `node`: the kernel log's host may be an FQDN
    and NVML's the hostname, while anomalies must name the Slurm node that a drain would target.
    """
    here = [s.model_copy(update={"node": node, "xid_events": ()}) for s in samples]
    seen = {x.digest: x for x in state.seen_xids}
    horizon = now - timedelta(seconds=xid_max_age_s)
    fresh: list[XidEvent] = []
    for raw in (*probe_xids(samples, xid_events), *kernel_xids):
        when = raw.observed_at or now
        if when.tzinfo is None:  # a naive time from some source must not make the age check raise
            when = when.replace(tzinfo=UTC)
        event = raw.model_copy(update={"node": node, "observed_at": when})
        digest = xid_digest(event, node)
        if digest in seen:
            continue
        assert event.observed_at is not None
        seen[digest] = SeenXid(digest=digest, at=event.observed_at)
        if event.observed_at >= horizon:
            fresh.append(event)

    findings = [f for f in evaluate(here, state.previous, fresh) if f.actionable]
    running = [j for j in jobs_on_node
               if j.state is JobState.RUNNING and node in j.nodes and opt_in.admits(j)]
    reported = {(r.job_id, r.attempt): list(r.anomaly_ids) for r in state.reported}
    anomalies: list[Anomaly] = []
    unattributed: list[str] = []
    for finding in findings:
        targets = _targets(finding, here, running)
        if not targets:
            unattributed.append(f"{finding.rule} on {finding.gpu_ref}")
        observed_at = _observed(finding, fresh, here, now)
        for job in targets:
            try:
                anomaly = finding.to_anomaly(job_id=job.job_id, job_attempt=job.restart_count, cluster=cluster,
                                             observed_at=observed_at, detected_at=now)
            except ValueError as err:  # a job id or node name Anomaly refuses must not wedge the agent
                unattributed.append(f"{finding.rule} on {finding.gpu_ref} for job {job.job_id}: {err}")
                continue
            ids = reported.setdefault((job.job_id, job.restart_count), [])
            if anomaly.id not in ids:
                ids.append(anomaly.id)
                anomalies.append(anomaly)

    # Forget attempts no longer on the node (bounded state); a requeued job is a new attempt anyway.
    present = {(j.job_id, j.restart_count) for j in jobs_on_node if node in j.nodes}
    kept_seen = sorted((x for x in seen.values() if x.at >= horizon), key=lambda x: (x.at, x.digest))
    new_state = NodeAgentState(
        previous=tuple(here) if here else state.previous,
        seen_xids=tuple(kept_seen[-MAX_SEEN_XIDS:]),
        reported=tuple(ReportedAttempt(job_id=job_id, attempt=attempt, anomaly_ids=tuple(ids))
                       for (job_id, attempt), ids in sorted(reported.items()) if (job_id, attempt) in present),
        unattributed=tuple(unattributed))
    return new_state, anomalies
