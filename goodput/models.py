"""The vocabulary of goodput: what an anomaly, an incident, an attribution and a plan are.

Every model is a frozen pydantic v2 model because these values cross process and history
boundaries (Temporal payloads, JSON files, the CLI). They are versioned by *adding defaulted
fields only*: a recorded workflow history must always deserialize into the current models.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from goodput.identifiers import validate_cluster, validate_job_id, validate_node_name

Cluster = Annotated[str, AfterValidator(validate_cluster)]
JobId = Annotated[str, AfterValidator(validate_job_id)]
NodeName = Annotated[str, AfterValidator(validate_node_name)]

MAX_EVIDENCE_LINE = 4096
MAX_EVIDENCE_LINES = 200


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", use_enum_values=False)


class AnomalySource(StrEnum):
    LOG = "log"
    GPU = "gpu"
    SCHEDULER = "scheduler"
    OPERATOR = "operator"


class AnomalyKind(StrEnum):
    CRASH = "crash"
    HANG = "hang"
    STRAGGLER = "straggler"
    GPU_FAULT = "gpu-fault"
    NODE_FAILURE = "node-failure"
    OOM = "oom"
    STORAGE = "storage"
    JOB_FAILED = "job-failed"
    OTHER = "other"


class Category(StrEnum):
    """The fixed failure vocabulary; dashboards and policies key on these strings."""

    GPU_HARDWARE = "gpu-hardware"
    NVLINK = "nvlink"
    NETWORK = "network"
    NCCL_TIMEOUT = "nccl-timeout"
    HANG = "hang"
    STRAGGLER = "straggler"
    OOM = "oom"
    APP_ERROR = "app-error"
    STORAGE = "storage"
    NODE_FAILURE = "node-failure"
    SCHEDULER_POLICY = "scheduler-policy"
    UNKNOWN = "unknown"


class CulpritKind(StrEnum):
    NODE = "node"
    GPU = "gpu"
    RANK = "rank"
    APP = "app"
    NETWORK = "network"
    STORAGE = "storage"
    UNKNOWN = "unknown"


class Mode(StrEnum):
    """How much goodput may do on its own: recommend, ask, or act."""

    MONITOR = "monitor"
    APPROVE = "approve"
    AUTONOMOUS = "autonomous"


class Outcome(StrEnum):
    RECOVERED = "recovered"
    STOPPED = "stopped"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"
    RECOMMENDED_ONLY = "recommended-only"


def _clip(line: str) -> str:
    return line if len(line) <= MAX_EVIDENCE_LINE else line[:MAX_EVIDENCE_LINE] + "…[truncated]"


def _clip_lines(lines: list[str]) -> list[str]:
    return [_clip(line) for line in lines[:MAX_EVIDENCE_LINES]]


class RestartEffect(StrEnum):
    """What the evidence says about restarting the job, whatever the cause of the failure."""

    NONE = "none"
    IN_JOB = "in-job"    # the job's own launcher (torchrun elastic, NVRx ft_launcher) restarted it
    GAVE_UP = "gave-up"  # the launcher stopped restarting and failed the job
    NEVER = "never"      # the job asked not to be restarted (NVRx exit code 93, a user's cancel)


class LogMark(Frozen):
    """The last line of a job file that one log anomaly's batch covered (goodput.detect.log_marks)."""

    path: str = Field(min_length=1, max_length=4096)
    inode: int | None = Field(default=None, ge=0)
    device: int | None = Field(default=None, ge=0)
    offset: int = Field(ge=0)


MAX_PUSHED_PATH = 4096  # PATH_MAX: no output file Slurm records is longer


class PushedFrom(Frozen):
    """Where a pushed anomaly's lines came from, as the shipper's record said: `file` is the path of
    the file it tailed, "" when the record named none. A shipper believes a file name, and a local
    user chooses file names, so this is a claim to check against Slurm's record of the job
    (goodput.diagnose.provenance), never a fact."""

    file: str = Field(default="", max_length=MAX_PUSHED_PATH)


class Anomaly(Frozen):
    """One observation that something is wrong with one job attempt."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:\-]+$")
    source: AnomalySource
    kind: AnomalyKind
    cluster: Cluster = "default"
    job_id: JobId
    job_attempt: int = Field(default=0, ge=0)
    nodes: tuple[NodeName, ...] = ()
    ranks: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    evidence: Annotated[list[str], AfterValidator(_clip_lines)] = Field(default_factory=list)
    signature_ids: tuple[str, ...] = ()
    category: Category | None = None
    observed_at: datetime
    detected_at: datetime
    # Where the job's own progress stood when this was seen (log detectors), for lost-work accounting.
    progress_step: int | None = None
    step_time_s: float | None = None
    # What this evidence says about restarting, net of its own order (an in-job restart the
    # launcher later gave up on is `gave-up`): attribution weighs it across the incident.
    restart_effect: RestartEffect = RestartEffect.NONE
    # Log detectors only: why the log's circumstances hold back a restart its rule allows (a fabric
    # configuration fault that an unchanged restart repeats); empty when nothing does.
    restart_held_back: str = Field(default="", max_length=400)
    # Log watchers only: how far into each file this anomaly's lines went, so a watcher that
    # resumes on another worker does not send them again under another batch (goodput.detect.log_marks).
    log_marks: tuple[LogMark, ...] = Field(default=(), max_length=16)
    # Log push only (None for everything goodput observed itself): the record's claimed source file.
    # Such an anomaly may move goodput only once that file is the job's own output.
    pushed: PushedFrom | None = None
    # How sure the verdict behind this anomaly was: goodput.diagnose.signatures.confidence for log
    # detectors, goodput.diagnose.source_grades for the node's own evidence (agents, NVML/DCGM,
    # NVSentinel, the scheduler); None for evidence that is not graded (pushes, older histories).
    confidence: Literal["high", "medium", "low"] | None = None
    # The rule this evidence counts towards in the track record when none of its signature ids
    # names one (NVML's `gpu-health:gpu-lost`, Slurm's reason rule): goodput.diagnose.source_grades.
    rule: str = Field(default="", max_length=200)
    # Straggler anomalies only: the step time per hour the job loses at its slowest rank's pace
    # (goodput.detect.straggler_case), the case for excluding the node.
    lost_s_per_h: float | None = Field(default=None, ge=0.0, le=1_000_000.0)

    @property
    def incident_key(self) -> IncidentKey:
        return IncidentKey(cluster=self.cluster, job_id=self.job_id, job_attempt=self.job_attempt)


class IncidentKey(Frozen):
    """Anomalies of one job attempt on one cluster coalesce into exactly one incident."""

    cluster: Cluster
    job_id: JobId
    job_attempt: int = Field(ge=0)

    @property
    def workflow_id(self) -> str:
        """A Temporal workflow id that is stable, readable and safe for any cluster name."""
        readable = re.sub(r"[^A-Za-z0-9_.\-]", "_", f"{self.cluster}-{self.job_id}-{self.job_attempt}")
        digest = hashlib.sha256(
            f"{self.cluster}\0{self.job_id}\0{self.job_attempt}".encode()
        ).hexdigest()[:8]
        return f"incident-{readable}-{digest}"


class Culprit(Frozen):
    kind: CulpritKind
    id: str = Field(max_length=512)
    confidence: float = Field(ge=0.0, le=1.0)


class Attribution(Frozen):
    """What failed and who is to blame; decides whether hardware is isolated at all."""

    category: Category
    culprits: tuple[Culprit, ...] = ()
    explanation: str = ""
    restart: bool = True
    drain: bool = False
    # Nodes the restarted job is kept away from without draining them: the deciding rule asked for
    # other hardware (Megatron's rerun on a different GPU); each is the job's own.
    exclude: tuple[str, ...] = ()
    # `in-job`: the job's own launcher is restarting it, so goodput neither restarts nor stops it;
    # `never`: the job asked not to be restarted, whatever the site's policy on the cause.
    restart_effect: RestartEffect = RestartEffect.NONE
    signature_ids: tuple[str, ...] = ()
    # Nodes that only job-controlled evidence (its logs) named and that Slurm does not list in the
    # job's allocation: reported so an operator can look, never drained or excluded.
    unverified_nodes: tuple[str, ...] = ()
    # The rule that decided (its signature id, or `category:<category>` when none did) and how sure
    # its verdict was: the track record and earned autonomy are kept per rule (goodput.recover.trust).
    rule: str = Field(default="", max_length=200)
    confidence: Literal["high", "medium", "low"] | None = None

    @property
    def culprit_nodes(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.culprits if c.kind is CulpritKind.NODE)


class ActionKind(StrEnum):
    DRAIN_NODES = "drain-nodes"
    REQUEUE = "requeue"
    RESUBMIT = "resubmit"
    STOP_JOB = "stop-job"
    NOTIFY = "notify"


class RecoveryAction(Frozen):
    kind: ActionKind
    nodes: tuple[NodeName, ...] = ()
    exclude: tuple[NodeName, ...] = ()
    reason: str = ""


class RecoveryPlan(Frozen):
    """The ordered actions for one incident, decided deterministically from policy."""

    actions: tuple[RecoveryAction, ...]
    rationale: str
    blocked_by_blast_radius: bool = False
    # Nodes blamed on the job's log alone: excluded from the job, not drained, marked suspect in
    # node memory (goodput.recover.corroboration).
    suspect_nodes: tuple[str, ...] = ()
    # A straggler's nodes, excluded at the job's next restart by goodput while the job keeps
    # running now (goodput.recover.straggler_plan).
    pending_exclusion: tuple[str, ...] = ()

    def has(self, kind: ActionKind) -> bool:
        return any(a.kind is kind for a in self.actions)

    def nodes_to_drain(self) -> tuple[str, ...]:
        return tuple(n for a in self.actions if a.kind is ActionKind.DRAIN_NODES for n in a.nodes)


class OperatorDecision(Frozen):
    """An approve or cancel from a person; who and why always end up in the history."""

    who: str = Field(min_length=1, max_length=128)
    reason: str = Field(min_length=1, max_length=2000)
    # Where it came from ("cli on host", "console 10.0.0.5"): recorded by the caller's side from
    # the connection, never from the request's own claims.
    origin: str = Field(default="", max_length=200)
