"""Memory of nodes across jobs: a node that keeps turning up in unrelated failures is the culprit.

One incident alone often cannot tell a flaky node from a flaky job: an NCCL timeout, a hang, a
crash without a decisive line implicates the whole allocation a little. Across jobs it can: when
jobs of different users fail ambiguously and the only node they shared is node7, node7 is the
common cause. And the converse: a job that fails on a different set of nodes every time points
at the job, not at any node.

This module is the pure part: what one incident contributes (`observation_of`), how suspicion
accrues and decays (`standing`), what the memory says about a new incident (`consult`), and how
that changes the incident's attribution (`with_memory`). The state lives in one durable
NodeMemoryWorkflow per cluster (workflows/node_memory.py); `goodput nodes` shows its standing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import Field

from goodput.models import Attribution, Category, Culprit, CulpritKind, Frozen
from goodput.scheduler import JobInfo

# Failures that say nothing about the nodes (the job's own error, its memory, the scheduler's
# decision) never add suspicion; everything else without a named culprit implicates the allocation.
_NOT_ABOUT_NODES = frozenset({Category.APP_ERROR, Category.OOM, Category.SCHEDULER_POLICY, Category.STORAGE})
MAX_OBSERVATIONS = 5_000
# The memory is its workflow's state and goes whole into each continue-as-new input, which Temporal
# refuses past 2 MB (the workflow task fails, again and again, and every consult waits on it). An
# observation names its job's every node: 5,000 of 64-node jobs are 4.7 MB of JSON. So the oldest
# go once the kept ones pass this, measured as `_json_bytes` reckons them (a little over the truth).
MAX_STATE_BYTES = 1024 * 1024
_OBSERVATION_JSON_BYTES = 160  # its keys, flags and timestamp, with no names in it (130 measured)
MAX_PENDING = 8  # nodes one job may have pending for its next restart


class NodeMemoryPolicy(Frozen):
    """When cross-job evidence is enough to blame a node (or a job)."""

    enabled: bool = True
    half_life_s: float = Field(default=24 * 3600.0, gt=0)
    window_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # A node is suspect when its score (each job that failed with it counts once, decayed by the
    # age of that job's latest failure) reaches this, and at least this many different jobs of this
    # many different users implicated it: one user's buggy code on one node is not enough.
    threshold: float = Field(default=1.5, gt=0)
    min_jobs: int = Field(default=2, ge=1)
    min_users: int = Field(default=2, ge=1)
    # The history must single nodes out: when more of one allocation's nodes than this share the
    # same suspicion (two large jobs overlap on dozens of nodes), none of them is blamed.
    max_suspects: int = Field(default=2, ge=1)
    # A job whose incidents implicated this many pairwise disjoint allocations points at itself.
    roaming_failures: int = Field(default=3, ge=2)


class Observation(Frozen):
    """What one incident says about nodes: the allocation it implicates, and how strongly."""

    incident_id: str
    job_id: str
    user: str = ""
    nodes: tuple[str, ...]
    # True: nothing named a culprit, the whole allocation shares the blame. False: `nodes` are the
    # culprits attribution named; recorded with full weight.
    ambiguous: bool
    at: datetime
    # Those of `nodes` the incident excluded from its job without draining them, since only its
    # log blamed them (goodput.recover.corroboration): shown as a suspect mark on the node.
    suspects: tuple[str, ...] = ()
    # Those of the job's nodes its straggler verdict excludes at the job's next restart, while the
    # job keeps running (goodput.recover.straggler_plan): read back only by this job's incidents.
    pending: tuple[str, ...] = Field(default=(), max_length=MAX_PENDING)


class NodeMemoryState(Frozen):
    """A cluster's recent observations, newest last (bounded by the policy's window)."""

    observations: tuple[Observation, ...] = ()


class NodeStanding(Frozen):
    """One node's record, for `goodput nodes` and for the decision."""

    node: str
    score: float
    jobs: tuple[str, ...]
    users: tuple[str, ...]
    last_at: datetime
    suspect: bool
    # Incidents that excluded the node from their job on their log alone, pending a second signal.
    marked_by: tuple[str, ...] = ()


class MemoryVerdict(Frozen):
    """What the cluster's memory says about one incident's allocation."""

    suspects: tuple[NodeStanding, ...] = ()
    roaming_job: bool = False
    note: str = ""
    # Nodes of this allocation that another job's incident named as its culprit within the window:
    # a second, independent signal for a drain (goodput.recover.corroboration).
    witnessed: tuple[str, ...] = ()
    # Nodes an earlier straggler verdict of this same job left pending for its next restart (never
    # another job's: one job's evidence excludes nodes from that job alone).
    pending: tuple[str, ...] = ()


class NodeMemory(Protocol):
    """Where an incident consults (and adds to) its cluster's memory of nodes."""

    async def consult(self, cluster: str, observation: Observation, policy: NodeMemoryPolicy) -> MemoryVerdict:
        """Add `observation` to the cluster's memory and say which of its nodes are suspects under `policy`."""
        ...


def observation_of(incident_id: str, attribution: Attribution, job: JobInfo, at: datetime) -> Observation | None:
    """The incident's contribution, or None when it says nothing about nodes."""
    if attribution.category in _NOT_ABOUT_NODES or not job.nodes:
        return None
    named = tuple(n for n in attribution.culprit_nodes if n in job.nodes)
    if named and attribution.drain:
        return Observation(incident_id=incident_id, job_id=job.job_id, user=job.user, nodes=named,
                           ambiguous=False, at=at)
    return Observation(incident_id=incident_id, job_id=job.job_id, user=job.user, nodes=job.nodes,
                       ambiguous=True, at=at)


def remember(state: NodeMemoryState, observation: Observation, now: datetime,
             policy: NodeMemoryPolicy) -> NodeMemoryState:
    """The state with `observation` added (once per incident) and what is too old dropped."""
    horizon = now - timedelta(seconds=policy.window_s)
    kept = [o for o in state.observations if o.at > horizon and o.incident_id != observation.incident_id]
    # The incident's later consultation replaces its observation, not the exclusion it left pending.
    earlier = [n for o in state.observations if o.incident_id == observation.incident_id for n in o.pending]
    if earlier:
        pending = tuple(dict.fromkeys((*earlier, *observation.pending)))[:MAX_PENDING]
        observation = observation.model_copy(update={"pending": pending})
    kept.append(observation)
    return NodeMemoryState(observations=newest_within_bytes(kept[-MAX_OBSERVATIONS:]))


def _json_bytes(observation: Observation) -> int:
    names = (*observation.nodes, *observation.suspects, *observation.pending)
    return (_OBSERVATION_JSON_BYTES + len(observation.incident_id) + len(observation.job_id) + len(observation.user)
            + sum(len(name) + 3 for name in names))


def newest_within_bytes(observations: Sequence[Observation], budget: int = MAX_STATE_BYTES) -> tuple[Observation, ...]:
    """The newest of `observations` (oldest first) whose JSON fits `budget`; the newest one always."""
    total = 0
    for index in range(len(observations) - 1, -1, -1):
        total += _json_bytes(observations[index])
        if total > budget and index < len(observations) - 1:
            return tuple(observations[index + 1:])
    return tuple(observations)


def _weight(observation: Observation, now: datetime, policy: NodeMemoryPolicy) -> float:
    age = max(0.0, (now - observation.at).total_seconds())
    return float(0.5 ** (age / policy.half_life_s))


def roaming_jobs(observations: Sequence[Observation], policy: NodeMemoryPolicy) -> frozenset[str]:
    """Jobs whose ambiguous failures landed on pairwise disjoint allocations often enough."""
    by_job: dict[str, list[frozenset[str]]] = {}
    for o in observations:
        if o.ambiguous:
            by_job.setdefault(o.job_id, []).append(frozenset(o.nodes))
    roaming: set[str] = set()
    for job_id, allocations in by_job.items():
        disjoint: list[frozenset[str]] = []
        for nodes in allocations:
            if all(not nodes & seen for seen in disjoint):
                disjoint.append(nodes)
        if len(disjoint) >= policy.roaming_failures:
            roaming.add(job_id)
    return frozenset(roaming)


def standing(state: NodeMemoryState, now: datetime, policy: NodeMemoryPolicy) -> tuple[NodeStanding, ...]:
    """Every remembered node, most suspect first. A roaming job's failures count for no node."""
    roaming = roaming_jobs(state.observations, policy)
    scores: dict[str, float] = {}
    jobs: dict[str, dict[str, float]] = {}
    users: dict[str, set[str]] = {}
    last: dict[str, datetime] = {}
    marked: dict[str, list[str]] = {}
    for o in state.observations:
        for node in o.suspects:
            marked.setdefault(node, []).append(o.incident_id)
        if o.job_id in roaming:
            continue
        weight = _weight(o, now, policy)
        for node in o.nodes:
            # One job failing ten times on a node is one witness: its strongest failure counts.
            per_job = jobs.setdefault(node, {})
            per_job[o.job_id] = max(per_job.get(o.job_id, 0.0), weight)
            if o.user:
                users.setdefault(node, set()).add(o.user)
            last[node] = max(last.get(node, o.at), o.at)
    for node, per_job in jobs.items():
        scores[node] = sum(per_job.values())
    found = [NodeStanding(node=node, score=round(scores[node], 4), jobs=tuple(sorted(jobs[node])),
                          users=tuple(sorted(users.get(node, ()))), last_at=last[node],
                          suspect=(scores[node] >= policy.threshold and len(jobs[node]) >= policy.min_jobs
                                   and len(users.get(node, ())) >= policy.min_users),
                          marked_by=tuple(marked.get(node, ())))
             for node in jobs]
    return tuple(sorted(found, key=lambda s: (-s.score, s.node)))


def consult(state: NodeMemoryState, observation: Observation, now: datetime,
            policy: NodeMemoryPolicy) -> tuple[NodeMemoryState, MemoryVerdict]:
    """Add the incident, then say which of its nodes are suspect (or that the job roams)."""
    state = remember(state, observation, now, policy)
    if observation.job_id in roaming_jobs(state.observations, policy):
        failures = sum(1 for o in state.observations if o.job_id == observation.job_id and o.ambiguous)
        return state, MemoryVerdict(roaming_job=True, pending=pending_for(state, observation.job_id), note=(
            f"job {observation.job_id} failed on a different set of nodes {failures} times: the job, not the "
            "nodes, is the common cause"))
    mine = set(observation.nodes)
    # A suspect mark counts: the next job's log on a node another job's log named settles it.
    witnessed = tuple(sorted({n for o in state.observations if o.job_id != observation.job_id and not o.ambiguous
                              for n in o.nodes} & mine))
    pending = pending_for(state, observation.job_id)
    suspects = tuple(s for s in standing(state, now, policy) if s.suspect and s.node in mine)
    if not suspects:
        return state, MemoryVerdict(witnessed=witnessed, pending=pending)
    if len(suspects) > policy.max_suspects:
        return state, MemoryVerdict(witnessed=witnessed, pending=pending, note=(
            f"{len(suspects)} nodes of this allocation share the same history of unrelated failures; "
            "not enough to single one out"))
    described = "; ".join(f"{s.node} (score {s.score:g}: jobs {', '.join(s.jobs)} of users {', '.join(s.users)})"
                          for s in suspects)
    return state, MemoryVerdict(suspects=suspects, witnessed=witnessed, pending=pending,
                                note=f"implicated by unrelated incidents: {described}")


def pending_for(state: NodeMemoryState, job_id: str) -> tuple[str, ...]:
    """The nodes `job_id`'s own straggler verdicts left pending for its next restart, within the
    memory's window (they expire with the observation that recorded them)."""
    return tuple(dict.fromkeys(n for o in state.observations if o.job_id == job_id for n in o.pending))[:MAX_PENDING]


def with_memory(attribution: Attribution, verdict: MemoryVerdict, job: JobInfo) -> Attribution:
    """The incident's attribution after the cluster's memory had its say.

    Only an incident that named no culprit of its own changes: a suspect node of its allocation
    becomes the culprit (and is drained); a roaming job blames the job and drains nothing.
    """
    if not (verdict.suspects or verdict.roaming_job) or (attribution.drain and attribution.culprit_nodes):
        return attribution
    if verdict.roaming_job:
        culprit = Culprit(kind=CulpritKind.APP, id=job.name or job.job_id, confidence=0.6)
        return attribution.model_copy(update={
            "culprits": (culprit, *attribution.culprits), "drain": False,
            "explanation": f"{attribution.explanation}; node memory: {verdict.note}"})
    nodes = [s.node for s in verdict.suspects if s.node in job.nodes]
    if not nodes:
        return attribution
    culprits = tuple(Culprit(kind=CulpritKind.NODE, id=n, confidence=0.7) for n in nodes)
    category = attribution.category if attribution.category is not Category.UNKNOWN else Category.NODE_FAILURE
    return attribution.model_copy(update={
        "category": category, "culprits": (*culprits, *attribution.culprits), "drain": True, "restart": True,
        "explanation": f"{attribution.explanation}; node memory: {verdict.note}: isolating {', '.join(nodes)}"})


class LocalNodeMemory:
    """In-process memory for tests and single-process tools; the service uses the workflow."""

    def __init__(self) -> None:
        self.states: dict[str, NodeMemoryState] = {}

    async def consult(self, cluster: str, observation: Observation, policy: NodeMemoryPolicy) -> MemoryVerdict:
        """Record the observation in this cluster's memory and say what the memory makes of it."""
        state, verdict = consult(self.states.get(cluster, NodeMemoryState()), observation, observation.at, policy)
        self.states[cluster] = state
        return verdict
