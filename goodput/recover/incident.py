"""What an incident looks like from outside: the report that queries and results return.

The workflow keeps one `IncidentReport` up to date as it moves; the CLI, the console and tests
read it through a query (running incidents) or the workflow result (closed ones), so both paths
show the same timeline. Also the small typed inputs and outputs of the recovery steps.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from goodput.checkpoints import Checkpoint, LostWork
from goodput.diagnose.node_memory import NodeMemoryPolicy, Observation
from goodput.models import (
    Anomaly,
    Attribution,
    Category,
    Frozen,
    IncidentKey,
    Mode,
    OperatorDecision,
    Outcome,
    RecoveryPlan,
)
from goodput.recover.audit import AuditRecord
from goodput.recover.breaker import BreakerPolicy, DrainRequest
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import ReturnToServicePolicy
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.spares import SparePolicy
from goodput.scheduler import JobInfo

# A storm can send thousands of anomalies for one job; history keeps every signal, but the
# report carries a bounded sample so queries and results stay small.
MAX_REPORTED_ANOMALIES = 500


class RecoveryStart(Frozen):
    """Input of RecoveryWorkflow; the policy is a snapshot so replays never see config drift."""

    key: IncidentKey
    policy: Policy = Field(default_factory=Policy)
    mode: Mode | None = None
    # True when the reporter is not the service (`goodput inject`, a node agent): `policy` is then
    # a placeholder and the workflow runs under the policy of the worker that runs it, the
    # service's; `mode` is only a request, honoured when stricter (goodput.recover.policy.governing_mode).
    # False (the service's own watchers and receivers, and every start recorded before the field
    # existed): `policy` is the service's snapshot and `mode`, when set, chooses.
    policy_from_service: bool = False
    # False where goodput's search attributes cannot be registered (no operator rights, or the
    # time-skipping test server): incidents then work, but the UI cannot filter them.
    index: bool = True


class TimelineEvent(Frozen):
    at: datetime
    state: IncidentState
    detail: str = ""


class NodeHealthRequest(Frozen):
    """The nodes an incident drained, for their return to service (workflows.node_health)."""

    cluster: str
    nodes: tuple[str, ...]
    incident_id: str
    policy: ReturnToServicePolicy
    # Set when a spare pool is configured: the node refills it once back in service.
    spares: SparePolicy | None = None
    # The rule whose verdict drained the nodes: a node back with no fault found counts against it.
    rule: str = ""
    # The shared drain reasons (goodput.recover.shared_fault) the drains carried: a node's return
    # resumes it only while its reason is the incident's own or one of these.
    faults: tuple[str, ...] = ()


class AuditInput(Frozen):
    records: tuple[AuditRecord, ...]


class WaitingStep(Frozen):
    """A recovery step Temporal is retrying or about to run: what an incident waits for now.

    An activity's attempts never reach the workflow until the last one: the service reads them
    from Temporal's description of the run (`IncidentService.get`). A local activity's are not
    there, so the workflow retries a local step itself and reports it in its own state (#29).
    """

    step: str
    attempt: int = Field(default=1, ge=1)
    last_failure: str = Field(default="", max_length=600)
    next_attempt_at: datetime | None = None

    def describe(self) -> str:
        text = f"{self.step} (attempt {self.attempt})"
        if self.last_failure:
            text += f", last failure: {self.last_failure}"
        if self.next_attempt_at is not None:
            text += f"; next attempt at {self.next_attempt_at:%H:%M:%S} UTC"
        return text


class IncidentReport(Frozen):
    incident_id: str
    key: IncidentKey
    state: IncidentState
    mode: Mode
    anomaly_count: int = 0
    anomalies: tuple[Anomaly, ...] = ()
    attribution: Attribution | None = None
    plan: RecoveryPlan | None = None
    job: JobInfo | None = None
    resumed_job_id: str | None = None
    decision: OperatorDecision | None = None
    decision_verb: str | None = None
    outcome: Outcome | None = None
    timeline: tuple[TimelineEvent, ...] = ()
    actions_done: tuple[str, ...] = ()
    checkpoint: Checkpoint | None = None
    lost_work: LostWork | None = None
    # Every action taken on the cluster and every operator decision (goodput.recover.audit).
    audit: tuple[AuditRecord, ...] = ()
    # One fault, many jobs: the node incidents (goodput.recover.node_incident) this job incident
    # is linked to, i.e. the faults it shares with the other jobs they hit.
    node_incidents: tuple[str, ...] = ()
    # For a running incident: the local step the workflow retries (its own), and the steps Temporal
    # is running or retrying (the service adds them from the run's description).
    waiting: tuple[WaitingStep, ...] = ()


class DecisionVerb(StrEnum):
    APPROVE = "approve"
    CANCEL = "cancel"


class Decision(Frozen):
    verb: DecisionVerb
    by: OperatorDecision


# -- step inputs and outputs ---------------------------------------------------------------


class AttributeInput(Frozen):
    incident_id: str
    key: IncidentKey
    anomalies: tuple[Anomaly, ...]


class AttributeResult(Frozen):
    attribution: Attribution
    job: JobInfo | None = None
    note: str = ""
    # What the job's own launcher recorded (NVRx's cycle info, when the job's comment names it).
    launcher: str = ""
    # Why nothing may be done on this evidence ("" when something may): every anomaly came from
    # pushed lines that are not the job's own output as Slurm records it (goodput.diagnose.provenance).
    # The plan is then a recommendation, whatever the mode.
    evidence_only: str = ""
    # The ids of the anomalies set aside as evidence only: when the incident's evidence is full,
    # these make room for new evidence, so a flood of forged lines cannot crowd out the real one.
    set_aside: tuple[str, ...] = Field(default=(), max_length=MAX_REPORTED_ANOMALIES)
    # When the attribute step began reading `job` (the worker's clock; None: no job, or a result
    # recorded before the field): the resume step reuses a young record (activities/resume.py).
    job_read_at: datetime | None = None


class IsolateInput(Frozen):
    incident_id: str
    nodes: tuple[str, ...]
    summary: str
    # When the incident's failure was first observable (its earliest anomaly's `observed_at`): the
    # action-latency metric runs from here to Slurm accepting the action. None from workflows
    # that predate it (their histories replay unchanged): the action then records no latency.
    observed_at: datetime | None = None


class ReserveInput(Frozen):
    cluster: str
    request: DrainRequest
    policy: BreakerPolicy


class MemoryInput(Frozen):
    """One incident's report to its cluster's memory of nodes."""

    cluster: str
    observation: Observation
    policy: NodeMemoryPolicy


class IsolateResult(Frozen):
    drained: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    # The faults whose shared reason the drains carried (goodput.recover.shared_fault): the
    # incident's record names its fault, the fault's drain reason names no incident.
    faults: tuple[str, ...] = ()


class CheckpointInput(Frozen):
    incident_id: str
    job: JobInfo


class CheckpointResult(Frozen):
    checkpoint: Checkpoint | None = None
    explanation: str = ""


class ResumeInput(Frozen):
    incident_id: str
    job_id: str
    strategy: ResumeStrategy
    exclude: tuple[str, ...] = ()
    restart_count_before: int = 0
    # Exported to a resubmitted job (GOODPUT_RESUME_FROM / GOODPUT_RESUME_STEP).
    environment: dict[str, str] = Field(default_factory=dict)
    observed_at: datetime | None = None  # as in IsolateInput
    # The hot-spare pool to restart the job in (None: none configured, queue as before).
    spares: SparePolicy | None = None
    # The attribute step's record of the job and when it was read: a requeue reuses it, young and
    # with the job's state read fresh, instead of reading the whole job again (#29). None: read it.
    known: JobInfo | None = None
    known_at: datetime | None = None


class ResumeResult(Frozen):
    job_id: str
    changed: bool
    detail: str = ""
    restart_count_before: int = 0
    # Output file sizes just before the resume: the new attempt's lines come after them.
    log_offsets: dict[str, int] = Field(default_factory=dict)
    # The pool the job was pointed at, and its spares that were free then ("" / (): not used).
    spare_pool: str = ""
    spare_nodes: tuple[str, ...] = ()
    # Slurm (25.11+) had requeued the job itself and held it (expedited requeue) and this resume
    # released it: its restart count moved before the incident read it, so the run that shows
    # it restarted is one count lower (workflow.patched "release-expedited-hold").
    released_expedite_hold: bool = False


class VerifyInput(Frozen):
    job_id: str
    restart_count_before: int = 0
    same_job: bool = True
    timeout_s: float
    poll_interval_s: float = 2.0
    # When set, running is not enough: the job must print progress past this step.
    progress_past: int | None = None
    progress_timeout_s: float = 600.0
    log_offsets: dict[str, int] = Field(default_factory=dict)
    capacity_wait_s: float = 0.0


class VerifyResult(Frozen):
    ok: bool
    detail: str
    nodes: tuple[str, ...] = ()  # where the job runs, once it does


class StopInput(Frozen):
    incident_id: str
    job_id: str
    observed_at: datetime | None = None  # as in IsolateInput


class Notification(Frozen):
    incident_id: str
    state: IncidentState
    summary: str
    detail: str = ""
    # For the closed-incident metrics (a terminal state's notification): what failed and the work
    # it cost. Defaults from workflows that predate them: counted under category "unknown".
    category: Category | None = None
    lost_work: LostWork | None = None
