"""Lost nodes in seconds: agents' heartbeats, the silence that makes a node suspect, and what corroborates it.

Slurm declares a node DOWN only after SlurmdTimeout (300 s by default), and every GPU of a job
that lost one node idles meanwhile. Each node agent heartbeats to the service every few seconds,
so a node whose agent falls silent for `missed` of its intervals is *suspect* within seconds. A
silence alone proves little: an agent restart, an agent's crash, or a network blip between the
head node and the compute nodes silences agents of healthy nodes. So a suspect becomes a node-loss
anomaly only with a second, independent signal (`corroborate`): Slurm's own word that the node
stopped responding, the job's output stopping when the node did, or the job's peers logging the
node's connection lost. The anomaly says which signals it had. When many agents fall silent at
once (`blip_fraction`) the fault is on the service's side of the network, and node loss is
suspended until they are heard again.

Pure: the tracker keeps last-seen times and takes `now` from its caller; the monitor in
workers/liveness.py does the I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import re2
from pydantic import BaseModel, ConfigDict, Field

from goodput.diagnose.source_grades import Grade, slurm_node_grade
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen
from goodput.scheduler import JobInfo, JobState, NodeInfo

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0
TOKEN_CONTEXT = b"goodput-heartbeat"
MAX_PEER_LINES = 3
MAX_LINE_CHARS = 300
# The connection-lost family the diagnosis catalogue knows (nccl.toml, "peer-connection-lost") and
# NCCL's own socket warnings; a line counts only when it also names the silent node.
_PEER_LOST = re2.compile(r"(?i)(?:connection (?:reset|closed) by (?:remote )?peer|broken pipe|connection refused|"
                         r"remote process exited|socket closed|connection closed|peer closed)")


class LivenessConfig(BaseModel):
    """`[liveness]`: the heartbeat endpoint and when a silent node is suspect."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8789, ge=0, le=65535)
    secret_file: Path | None = None
    """Keys every node's heartbeat token (`goodput agent-token --node N`); at least 32 bytes."""
    missed: int = Field(default=3, ge=2, le=100)
    """A node is suspect after this many of its agent's intervals without a heartbeat (6 s at 2 s)."""
    blip_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    """More than this fraction of the known agents silent at once (and at least two) is the
    service's network or the agents' deployment, not that many lost nodes: node loss waits."""
    output_window_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    """The job's output counts as stopped with the node only if it was written within this before
    the node's last heartbeat (a job that prints every ten minutes says nothing by being quiet)."""
    gap_factor: float = Field(default=3.0, ge=1.0, le=100.0)
    """Output counts as stopped only after this many times the longest gap between the job's recent
    writes (a job that prints every ten seconds is not stopped after six)."""
    forget_after_s: float = Field(default=3600.0, gt=0.0)
    """An agent silent this long is forgotten (a node taken out of the cluster), so it no longer
    counts toward `blip_fraction`; it is known again from its next heartbeat."""
    max_nodes: int = Field(default=100_000, ge=1)
    check_s: float = Field(default=1.0, gt=0.0, le=60.0)
    jobs_refresh_s: float = Field(default=5.0, gt=0.0, le=600.0)
    """How often the running jobs are listed: a job's output rhythm is learnt from then on, so a job
    younger than about this plus a few of its writes has none yet (Slurm's node state still counts)."""
    max_tail_bytes: int = Field(default=64 << 10, ge=1024, le=4 << 20)
    stack_wait_s: float = Field(default=30.0, ge=1.0, le=90.0)
    """How long a hang incident waits for the agents' stack dumps (`/v1/stacks`) before it goes on
    without those that did not come; a request expires a little after this."""
    gpu_window: int = Field(default=12, ge=2, le=360)
    """GPU reports kept per node (`POST /v1/gpu-samples`): two minutes at the agents' default 10 s feed,
    so a hang declared a minute after the last step still sees the GPUs busy before it."""
    gpu_max_age_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    """A GPU report older than this explains nothing (its agent stopped sending)."""
    gpu_max_nodes: int = Field(default=2048, ge=1, le=1_000_000)
    """Nodes whose GPU reports are kept; about 1.6 KiB per GPU per report (8 GPUs x 12 reports x 2048
    nodes is about 320 MiB at most). Reports from further nodes are refused (503) until one falls silent."""


# -- identity ----------------------------------------------------------------------------------


def heartbeat_token(secret: bytes, cluster: str, node: str) -> str:
    """The one node's token: an agent holding it can speak for its own node and for no other."""
    message = b"\0".join([TOKEN_CONTEXT, cluster.encode(), node.encode()])
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def heartbeat_authentic(token: str, secret: bytes, cluster: str, node: str) -> bool:
    """Constant time in the token's content."""
    expected = heartbeat_token(secret, cluster, node).encode()
    return hmac.compare_digest(token.encode("utf-8", errors="replace"), expected)


# -- the tracker -------------------------------------------------------------------------------


class Suspect(Frozen):
    node: str
    last_seen: datetime
    interval_s: float
    silent_s: float


class Verdict(Frozen):
    """One look at every known agent: who is suspect, and whether node loss is suspended."""

    suspects: tuple[Suspect, ...] = ()
    known: int = 0
    suspended: bool = False

    def note(self) -> str:
        if not self.suspects:
            return ""
        names = ", ".join(s.node for s in self.suspects[:10]) + (" ..." if len(self.suspects) > 10 else "")
        if self.suspended:
            return (f"{len(self.suspects)} of {self.known} agents silent at once ({names}): taken for a network "
                    "blip or an agent roll-out, not node losses; node loss suspended until they are heard again")
        return f"suspect (heartbeat missed, no node loss without a second signal): {names}"


class _Seen:
    __slots__ = ("interval_s", "last")

    def __init__(self, last: datetime, interval_s: float) -> None:
        self.last, self.interval_s = last, interval_s


class LivenessTracker:
    """Last heartbeat per node, bounded by `max_nodes` (a node beyond it is refused, and counted)."""

    def __init__(self, config: LivenessConfig) -> None:
        self.config = config
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self.refused = 0

    def beat(self, node: str, now: datetime, interval_s: float) -> bool:
        """Record a heartbeat; False when the node is new and the tracker full."""
        interval = min(max(interval_s, MIN_INTERVAL_S), MAX_INTERVAL_S)
        if node not in self._seen and len(self._seen) >= self.config.max_nodes:
            self.refused += 1
            return False
        self._seen[node] = _Seen(now, interval)
        self._seen.move_to_end(node)
        return True

    def last_seen(self, node: str) -> datetime | None:
        seen = self._seen.get(node)
        return seen.last if seen else None

    def __len__(self) -> int:
        return len(self._seen)

    def verdict(self, now: datetime) -> Verdict:
        forget = timedelta(seconds=self.config.forget_after_s)
        for node in [n for n, s in self._seen.items() if now - s.last > forget]:
            del self._seen[node]
        suspects = []
        for node, seen in self._seen.items():
            silent = (now - seen.last).total_seconds()
            if silent >= self.config.missed * seen.interval_s:
                suspects.append(Suspect(node=node, last_seen=seen.last, interval_s=seen.interval_s, silent_s=silent))
        known = len(self._seen)
        suspended = len(suspects) >= 2 and len(suspects) > self.config.blip_fraction * known
        return Verdict(suspects=tuple(sorted(suspects, key=lambda s: s.node)), known=known, suspended=suspended)


# -- corroboration -----------------------------------------------------------------------------


MAX_GAPS = 8


class OutputRhythm(Frozen):
    """When one job's output was last seen to change, and the recent gaps between changes."""

    written_at: datetime
    gaps: tuple[float, ...] = ()

    def observe(self, written_at: datetime) -> OutputRhythm:
        if written_at <= self.written_at:
            return self
        gap = (written_at - self.written_at).total_seconds()
        return OutputRhythm(written_at=written_at, gaps=(*self.gaps, gap)[-MAX_GAPS:])

    @property
    def max_gap_s(self) -> float | None:
        return max(self.gaps) if self.gaps else None


MAX_SIZES = 32


class SizeHistory(Frozen):
    """One output file's recent (write time, size) pairs: where it stood when a node was last heard,
    so that only what was written since is read for peers' complaints (an old line about the node,
    from a fault the job got over, must not corroborate today's silence)."""

    points: tuple[tuple[datetime, int], ...] = ()

    def observe(self, written_at: datetime, size: int) -> SizeHistory:
        if self.points and self.points[-1] == (written_at, size):
            return self
        return SizeHistory(points=(*self.points, (written_at, size))[-MAX_SIZES:])

    def offset_at(self, when: datetime) -> int | None:
        """The file's size as last seen written at or before `when`; None when not known that far back."""
        sizes = [size for at, size in self.points if at <= when]
        return sizes[-1] if sizes else None


class JobOutput(Frozen):
    """What the monitor read of one job's output file: when it was last written, its rhythm, its tail."""

    job: JobInfo
    written_at: datetime | None = None
    max_gap_s: float | None = None
    """The longest recent gap between writes the monitor saw; None: no rhythm known, no output signal."""
    tail: str = ""


def _names_node(line: str, node: str) -> bool:
    """The node's name as a word of the line (node1 must not match node10)."""
    start = 0
    while (at := line.find(node, start)) >= 0:
        before = line[at - 1] if at else " "
        after = line[at + len(node)] if at + len(node) < len(line) else " "
        if not (before.isalnum() or before in "-_") and not (after.isalnum() or after in "-_"):
            return True
        start = at + 1
    return False


def peer_lines(tail: str, node: str) -> list[str]:
    """Lines of a job's output that report the connection to `node` lost."""
    found = []
    for line in tail.splitlines():
        if _names_node(line, node) and _PEER_LOST.search(line):
            found.append(line.strip()[:MAX_LINE_CHARS])
            if len(found) >= MAX_PEER_LINES:
                break
    return found


def signals(suspect: Suspect, node: NodeInfo | None, output: JobOutput, now: datetime,
            config: LivenessConfig) -> list[str]:
    """The second signals for one job on a suspect node, as evidence lines (empty: none)."""
    out = []
    if node is not None and node.dead:
        out.append(f"slurm: node {suspect.node} {node.state} {' '.join(node.flags)}".strip())
    written = output.written_at
    if written is None:
        return out
    # The node fell silent up to one interval after its last heartbeat; output written later than
    # that came from a live node.
    silent_from = suspect.last_seen + timedelta(seconds=suspect.interval_s)
    window = timedelta(seconds=config.output_window_s)
    quiet = (now - written).total_seconds()
    gap = output.max_gap_s
    if (gap is not None and suspect.last_seen - window <= written <= silent_from
            and quiet >= max(config.missed * suspect.interval_s, config.gap_factor * gap)):
        out.append(f"output: job {output.job.job_id} wrote nothing for {quiet:.1f} s (it wrote at least every "
                   f"{gap:.1f} s before), since the node was last heard")
    if written > suspect.last_seen:
        out.extend(f"peer: {line}" for line in peer_lines(output.tail, suspect.node))
    return out


def _anomaly_id(cluster: str, job: JobInfo, node: str, since: datetime) -> str:
    key = "\0".join([cluster, job.job_id, str(job.restart_count), "node-loss", node, since.isoformat()])
    return "loss-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def loss_grade(node: NodeInfo | None) -> Grade:
    """A silent agent with Slurm saying the node is dead is graded by Slurm's reason for it; a silent
    agent with only the job's output or its peers' lines to back it is `medium` (the node may be
    alive behind a broken network), under its own rule."""
    if node is not None and node.dead:
        return slurm_node_grade(node.reason)
    return Grade(confidence="medium", rule="node-loss")


def corroborate(suspect: Suspect, *, cluster: str, node: NodeInfo | None, outputs: Sequence[JobOutput],
                now: datetime, config: LivenessConfig) -> list[Anomaly]:
    """A node-loss anomaly for each running job on the suspect node that has a second signal.

    Slurm's node state counts for every job on the node; output and peer lines for their own job.
    Without any second signal the answer is empty: a silent agent alone never opens an incident.
    """
    anomalies = []
    heartbeat = (f"heartbeat: agent on {suspect.node} silent for {suspect.silent_s:.1f} s "
                 f"({config.missed} x its {suspect.interval_s:g} s interval; last heard "
                 f"{suspect.last_seen.isoformat(timespec='seconds')})")
    for output in outputs:
        job = output.job
        if job.state is not JobState.RUNNING or suspect.node not in job.nodes:
            continue
        found = signals(suspect, node, output, now, config)
        if not found:
            continue
        grade = loss_grade(node)
        anomalies.append(Anomaly(
            id=_anomaly_id(cluster, job, suspect.node, suspect.last_seen), source=AnomalySource.SCHEDULER,
            kind=AnomalyKind.NODE_FAILURE, cluster=cluster, job_id=job.job_id, job_attempt=job.restart_count,
            nodes=(suspect.node,), category=Category.NODE_FAILURE, confidence=grade.confidence, rule=grade.rule,
            evidence=[f"node loss: {suspect.node} (heartbeat missed, corroborated by "
                      f"{', '.join(sorted({line.split(':', 1)[0] for line in found}))})", heartbeat, *found],
            observed_at=suspect.last_seen, detected_at=now))
    return anomalies
