"""Everything a recovery incident knows, in one typed object, and what its report shows of it.

RecoveryWorkflow (workflows.recovery) keeps one `RecoveryState` and is the only code that changes
it; its step functions (workflows.node_link, workflows.recovery_resume, ...) read it and hand
back values. Keeping the state here, plain and free of Temporal, makes the incident's memory one
list of fields a reader can check, and lets the report and the decisions over it
(goodput.recover.recovery_rules) be tested without a workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from goodput.checkpoints import Checkpoint, LostWork
from goodput.diagnose.node_memory import MemoryVerdict
from goodput.models import Anomaly, IncidentKey, LogMark, Mode, RecoveryPlan
from goodput.recover.audit import AuditRecord
from goodput.recover.incident import AttributeResult, Decision, IncidentReport, TimelineEvent, WaitingStep
from goodput.recover.lifecycle import OUTCOME_OF, IncidentState
from goodput.recover.node_incident import LinkAnswer
from goodput.recover.spares import SpareGrant


@dataclass
class RecoveryState:
    mode: Mode
    state: IncidentState = IncidentState.DETECTED
    # Evidence (the `anomaly` signal): what is kept (bounded), what was counted, and what not twice.
    anomalies: list[Anomaly] = field(default_factory=list)
    anomaly_count: int = 0
    weighed: int = 0  # how many anomalies the latest attribution saw
    seen_ids: set[str] = field(default_factory=set)
    set_aside: set[str] = field(default_factory=set)  # anomalies attribution found to be evidence only
    log_marks: tuple[LogMark, ...] = ()
    evidence_deadline: datetime | None = None  # while only evidence-only anomalies came
    # The operator's word, and what the incident made of the evidence.
    decision: Decision | None = None
    attributed: AttributeResult | None = None
    memory: MemoryVerdict | None = None  # what the node memory said of the latest attribution
    plan: RecoveryPlan | None = None
    # What it did.
    timeline: list[TimelineEvent] = field(default_factory=list)
    actions_done: list[str] = field(default_factory=list)
    resumed_job_id: str | None = None
    checkpoint: Checkpoint | None = None
    lost_work: LostWork | None = None
    audit: list[AuditRecord] = field(default_factory=list)
    audit_written: int = 0  # how many of `audit` the audit log already has
    # Reported and indexed so that a node fault lists every job it hit (workflows.node_link).
    node_incidents: list[str] = field(default_factory=list)
    node_answers: dict[str, LinkAnswer] = field(default_factory=dict)  # per node, from `node_decision`
    spare_grants: dict[str, SpareGrant] = field(default_factory=dict)  # pool -> the owner it let in
    # A straggler's job saved a newer checkpoint while its exclusion pended (`next-checkpoint`).
    saved_since_pend: Checkpoint | None = None
    trust_rule: str = ""  # the rule whose recommendation the cluster's track record holds (goodput.recover.trust)
    # A local step the workflow retries itself (workflows.recovery_steps.run_local_step): per step,
    # its attempt and last failure, which Temporal's pending activities do not list.
    waiting: dict[str, WaitingStep] = field(default_factory=dict)

    def show_waiting(self, step: str, waiting: WaitingStep | None) -> None:
        """What `step` waits for now (the report's `waiting`); None once it went through or gave up."""
        if waiting is None:
            self.waiting.pop(step, None)
        else:
            self.waiting[step] = waiting


def incident_report(incident_id: str, key: IncidentKey, s: RecoveryState) -> IncidentReport:
    """The `report` query's answer: the incident as the CLI, the console and the tests see it."""
    attributed = s.attributed
    return IncidentReport(
        incident_id=incident_id, key=key, state=s.state, mode=s.mode,
        anomaly_count=s.anomaly_count, anomalies=tuple(s.anomalies),
        attribution=attributed.attribution if attributed else None, plan=s.plan,
        job=attributed.job if attributed else None, resumed_job_id=s.resumed_job_id,
        decision=s.decision.by if s.decision else None,
        decision_verb=s.decision.verb.value if s.decision else None,
        outcome=OUTCOME_OF.get(s.state), timeline=tuple(s.timeline),
        actions_done=tuple(s.actions_done), checkpoint=s.checkpoint, lost_work=s.lost_work,
        audit=tuple(s.audit), node_incidents=tuple(s.node_incidents), waiting=tuple(s.waiting.values()))
