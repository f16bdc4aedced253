"""Attribution: from the anomalies of one incident to a category and the culprits.

Pure: the same anomalies and job description always give the same attribution. The signature
catalogue (goodput.diagnose.signatures) gives each log-derived anomaly a category and precedence; here the
evidence of a whole incident is weighed, root causes over knock-on effects, and the application is
blamed (and no node drained) when the evidence says the application is at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from goodput.diagnose.layout import JobLayout, Located, locate
from goodput.diagnose.signatures import ROLE_ORDER, Catalogue, Role, Signature, default_catalogue
from goodput.models import (
    Anomaly,
    AnomalyKind,
    AnomalySource,
    Attribution,
    Category,
    Culprit,
    CulpritKind,
    RestartEffect,
)
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo

# For anomalies that carry no category of their own: what their kind most likely means.
_KIND_DEFAULTS: dict[AnomalyKind, tuple[Category, bool, bool]] = {
    # kind: (category, restart, drain)
    AnomalyKind.GPU_FAULT: (Category.GPU_HARDWARE, True, True),
    AnomalyKind.NODE_FAILURE: (Category.NODE_FAILURE, True, True),
    AnomalyKind.HANG: (Category.HANG, True, False),
    AnomalyKind.STRAGGLER: (Category.STRAGGLER, True, True),
    AnomalyKind.OOM: (Category.OOM, False, False),
    AnomalyKind.STORAGE: (Category.STORAGE, True, False),
    AnomalyKind.CRASH: (Category.UNKNOWN, True, False),
    AnomalyKind.JOB_FAILED: (Category.UNKNOWN, True, False),
    AnomalyKind.OTHER: (Category.UNKNOWN, True, False),
}

_CATEGORY_DEFAULTS: dict[Category, tuple[bool, bool]] = {
    # category: (restart, drain)
    Category.GPU_HARDWARE: (True, True),
    Category.NVLINK: (True, True),
    Category.NETWORK: (True, True),
    Category.NODE_FAILURE: (True, True),
    Category.STRAGGLER: (True, True),
    Category.NCCL_TIMEOUT: (True, False),
    Category.HANG: (True, False),
    Category.OOM: (False, False),
    Category.APP_ERROR: (False, False),
    Category.STORAGE: (True, False),
    Category.SCHEDULER_POLICY: (False, False),
    Category.UNKNOWN: (True, False),
}

# Higher wins when several anomalies disagree: hardware explains software symptoms, not the
# other way round (an Xid explains the NCCL timeout that followed it).
PRECEDENCE: dict[Category, int] = {
    Category.GPU_HARDWARE: 100, Category.NVLINK: 95, Category.NODE_FAILURE: 90,
    Category.NETWORK: 80, Category.STORAGE: 70, Category.OOM: 60, Category.APP_ERROR: 50,
    Category.STRAGGLER: 40, Category.NCCL_TIMEOUT: 30, Category.HANG: 20,
    Category.SCHEDULER_POLICY: 10, Category.UNKNOWN: 0,
}


_HARDWARE = frozenset({Category.GPU_HARDWARE, Category.NVLINK, Category.NODE_FAILURE, Category.NETWORK})

# Where an anomaly's node names come from decides whether they may be acted on. GPU probes and the
# node agent report their own node, the scheduler watcher reads Slurm, operators are trusted; a
# log is the job's own output, so any node it names is an attacker's choice until Slurm confirms
# the node is allocated to that very job.
TRUSTED_NODE_SOURCES = frozenset({AnomalySource.GPU, AnomalySource.SCHEDULER, AnomalySource.OPERATOR})


def vouched_nodes(anomaly: Anomaly, job: JobInfo | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nodes this anomaly may implicate, nodes it names that nobody vouches for).

    Log evidence may only implicate nodes of the job's own allocation as Slurm records it; with
    no job record (or an empty allocation) it implicates none.
    """
    if anomaly.source in TRUSTED_NODE_SOURCES:
        return anomaly.nodes, ()
    allocation = frozenset(job.nodes) if job is not None else frozenset()
    return (tuple(n for n in anomaly.nodes if n in allocation),
            tuple(n for n in anomaly.nodes if n not in allocation))


def category_of(anomaly: Anomaly, catalogue: Catalogue | None = None) -> Category:
    if anomaly.category is not None:
        return anomaly.category
    sig = lead_signature(anomaly, catalogue)
    return sig.category if sig is not None else _KIND_DEFAULTS[anomaly.kind][0]


def lead_signature(anomaly: Anomaly, catalogue: Catalogue | None = None) -> Signature | None:
    """The strongest catalogue entry an anomaly names; ids the catalogue does not know are ignored."""
    if not anomaly.signature_ids:
        return None
    cat = catalogue or default_catalogue()
    named = (cat.get(i) for i in anomaly.signature_ids)
    known = [s for s in named if s is not None and s.role is not Role.LOCATOR]
    return max(known, key=lambda s: s.rank_key) if known else None


def effect_of(anomaly: Anomaly, catalogue: Catalogue | None = None) -> RestartEffect:
    """The anomaly's own restart effect, or, for evidence that carries only signature ids (a push,
    an older payload), the one its signatures imply: never wins, a give-up beats an in-job
    restart when their order is unknown (restarting is what goodput did before it knew)."""
    if anomaly.restart_effect is not RestartEffect.NONE or not anomaly.signature_ids:
        return anomaly.restart_effect
    cat = catalogue or default_catalogue()
    effects = {sig.restart_effect for sig in (cat.get(i) for i in anomaly.signature_ids) if sig is not None}
    for effect in (RestartEffect.NEVER, RestartEffect.GAVE_UP, RestartEffect.IN_JOB):
        if effect in effects:
            return effect
    return RestartEffect.NONE


def net_effect(anomalies: Sequence[Anomaly], catalogue: Catalogue | None = None) -> RestartEffect:
    """What an incident's evidence, in the order it was observed, says about restarting: a `never`
    anywhere stands; otherwise the latest of an in-job restart and a give-up decides."""
    effects = [(a.observed_at, index, effect_of(a, catalogue)) for index, a in enumerate(anomalies)]
    seen = [(at, index, effect) for at, index, effect in effects if effect is not RestartEffect.NONE]
    if any(effect is RestartEffect.NEVER for _, _, effect in seen):
        return RestartEffect.NEVER
    return max(seen, key=lambda item: (item[0], item[1]))[2] if seen else RestartEffect.NONE


_EFFECT_WHY = {
    RestartEffect.NEVER: "the job asked not to be restarted (its launcher's exit code or a user's cancel): "
                         "not restarted, whatever the cause",
    RestartEffect.IN_JOB: "the job's own launcher restarted it in-job and has not given up since: goodput "
                          "neither restarts nor stops it (a cluster restart on top would be a double restart)",
}


# A launcher that kills a hung rank itself (NVRx's rank monitor) leaves exit code -9 behind: in a
# later batch of lines than the timeout it answers, that -9 is the launcher's kill, not the OOM
# killer (the verdict of one batch applies the same rule line by line).
_LAUNCHER_KILLS = frozenset({"nvrx-heartbeat-timeout", "nvrx-section-timeout"})
_SIGKILL_ID = "torchrun-exit-sigkill"
# So are the peers' tracebacks that follow the kill: a rank that lost its peer reports the lost
# connection (and the traceback that carries it); blaming the application for that would turn a
# hang the launcher handled into an application error that is never restarted.
_AFTER_LAUNCHER_KILL = frozenset({_SIGKILL_ID, "dist-connection-lost", "python-traceback",
                                  # the peer's launcher then reports that worker's exit code 1
                                  "elastic-worker-exit-status"})
# "After" by a little slack: `srun -l` forwards each node's output on its own, so a peer's lines
# can reach the log a moment before the launcher's timeout line that caused them. A rank that
# really failed first leaves its peers blocked for the whole heartbeat timeout before the kill
# (8 s in the lab, minutes in production), longer than this.
_KILL_ORDER_SLACK = timedelta(seconds=5)


def _who_said_never(anomalies: Sequence[Anomaly], catalogue: Catalogue) -> str:
    """Where the first `never` came from: the signature's own words, or the scheduler's evidence."""
    for anomaly in sorted(anomalies, key=lambda a: a.observed_at):
        if effect_of(anomaly, catalogue) is not RestartEffect.NEVER:
            continue
        for sig in (catalogue.get(i) for i in anomaly.signature_ids):
            if sig is not None and sig.restart_effect is RestartEffect.NEVER:
                return f" ({sig.id}: {sig.explanation})"
        return f" ({anomaly.evidence[0][:200]})" if anomaly.evidence else ""
    return ""


def _weight(anomaly: Anomaly, catalogue: Catalogue, launcher_kill_at: datetime | None = None) -> tuple[int, int]:
    """(role, precedence): a root cause outranks any knock-on effect, then precedence decides."""
    sig = lead_signature(anomaly, catalogue)
    if sig is None:
        return ROLE_ORDER[Role.ROOT], PRECEDENCE[category_of(anomaly, catalogue)]
    if (sig.id in _AFTER_LAUNCHER_KILL and launcher_kill_at is not None
            and anomaly.observed_at >= launcher_kill_at - _KILL_ORDER_SLACK):
        return ROLE_ORDER[Role.KNOCK_ON], sig.precedence
    return sig.rank_key


def attribute(anomalies: Sequence[Anomaly], job: JobInfo | None = None,
              catalogue: Catalogue | None = None, *, layout: JobLayout | None = None) -> Attribution:
    """Weigh all the evidence of one incident; the strongest root cause decides. `layout` (from
    goodput's Slurm prolog) places ranks and GPUs the evidence names without a host."""
    if not anomalies:
        return Attribution(category=Category.UNKNOWN, explanation="no evidence", restart=False)
    cat = catalogue or default_catalogue()
    kill_at = min((a.observed_at for a in anomalies if _LAUNCHER_KILLS.intersection(a.signature_ids)), default=None)

    def weight(a: Anomaly) -> tuple[int, int]:
        return _weight(a, cat, kill_at)

    def key(a: Anomaly) -> tuple[int, int, object, str]:
        role, precedence = weight(a)
        return (-role, -precedence, a.observed_at, a.id)

    ranked = sorted(anomalies, key=key)
    lead = ranked[0]
    category = category_of(lead, cat)
    sig = lead_signature(lead, cat)
    if sig is not None and sig.category == category:
        restart, drain = sig.restart, sig.drain
    else:
        restart, drain = _CATEGORY_DEFAULTS[category]
    # Knock-on anomalies never contribute culprits: a socket closed on node X says X's peer died.
    lead_role = weight(lead)[0]
    supporting = [a for a in ranked if category_of(a, cat) == category and weight(a)[0] == lead_role]

    vouched = {a.id: vouched_nodes(a, job) for a in supporting}
    unverified = tuple(dict.fromkeys(n for a in supporting for n in vouched[a.id][1]))
    culprits: list[Culprit] = []
    located = Located()
    if drain or category in _HARDWARE:
        nodes = list(dict.fromkeys(n for a in supporting for n in vouched[a.id][0]))
        if not nodes and layout is not None and job is not None and any(a.ranks or a.gpus for a in supporting):
            located = locate(layout, job.nodes, ranks=[r for a in supporting for r in a.ranks],
                             gpus=[g for a in supporting for g in a.gpus])
            nodes = list(located.nodes)
        if not nodes:
            drain = False
            if category is Category.STRAGGLER:
                # Restarting onto the same slow node helps nobody: without a host, only report it.
                restart = False
        confidence = (0.9 if len(nodes) == 1 else 0.6) if drain else 0.5
        culprits += [Culprit(kind=CulpritKind.NODE, id=n, confidence=confidence) for n in nodes]
        culprits += [Culprit(kind=CulpritKind.GPU, id=g, confidence=0.8 if drain else 0.5)
                     for g in dict.fromkeys([*(g for a in supporting for g in a.gpus), *located.gpus])]
    elif category is Category.APP_ERROR:
        culprits.append(Culprit(kind=CulpritKind.APP, id=job.name if job and job.name else "application",
                                confidence=0.8))
    ranks = list(dict.fromkeys(r for a in supporting for r in a.ranks))
    culprits += [Culprit(kind=CulpritKind.RANK, id=f"rank {r}", confidence=0.5) for r in ranks[:8]]

    signatures = tuple(dict.fromkeys(s for a in ranked for s in a.signature_ids))
    explanation = _explain(category, lead, culprits, len(anomalies), drain, sig)
    if located.note:
        explanation += f"; {located.note}"
    effect, restart, why = _restart_after_effects(anomalies, lead, job, cat, restart)
    explanation += why
    if unverified:
        explanation += (f"; the job's own output names {', '.join(unverified)}, not allocated to "
                        f"{'job ' + job.job_id if job is not None else 'this job (no scheduler record)'}: "
                        "reported, never acted on")
    moved, note = _moved_from(sig, category, culprits, restart=restart, drain=drain)
    explanation += note
    return Attribution(category=category, culprits=tuple(culprits), explanation=explanation,
                       restart=restart, drain=drain, exclude=moved, signature_ids=signatures,
                       unverified_nodes=unverified,
                       restart_effect=effect, rule=sig.id if sig is not None else (lead.rule or f"category:{category}"),
                       confidence=lead.confidence)


def _restart_after_effects(anomalies: Sequence[Anomaly], lead: Anomaly, job: JobInfo | None, cat: Catalogue,
                           restart: bool) -> tuple[RestartEffect, bool, str]:
    """The restart effect of the evidence, the restart it leaves, and what the explanation says of it."""
    why = ""
    effect = net_effect(anomalies, cat)
    if effect is RestartEffect.IN_JOB and job is not None and job.state not in ACTIVE_JOB_STATES:
        # A launcher restarts workers inside a running job; once the job itself ended, nothing
        # in it restarts anything any more, whatever its last line said.
        effect = RestartEffect.GAVE_UP
        why += (f"; the job's launcher had restarted it in-job, but job {job.job_id} has since ended "
                f"({job.state}): no launcher restarts it now")
    if effect in _EFFECT_WHY:
        why += f"; {_EFFECT_WHY[effect]}"
        if effect is RestartEffect.NEVER:
            why += _who_said_never(anomalies, cat)
        return effect, False, why
    if lead.restart_held_back and restart:  # the deciding log's circumstances: a restart repeats the fault
        return effect, False, f"{why}; {lead.restart_held_back}"
    return effect, restart, why


def _moved_from(sig: Signature | None, category: Category, culprits: Sequence[Culprit], *, restart: bool,
                drain: bool) -> tuple[tuple[str, ...], str]:
    """A rule that asks for other hardware keeps the restarted job off its culprit's node, undrained:
    the nodes, and what the explanation says of them."""
    if sig is None or not sig.exclude or sig.category != category or not restart or drain:
        return (), ""
    moved = tuple(c.id for c in culprits if c.kind is CulpritKind.NODE)
    return moved, f"; restarted away from {', '.join(moved)}, which stays in service" if moved else ""


def _explain(category: Category, lead: Anomaly, culprits: Sequence[Culprit], count: int,
             drain: bool, sig: Signature | None) -> str:
    blamed = ", ".join(c.id for c in culprits if c.kind in (CulpritKind.NODE, CulpritKind.GPU))
    parts = [f"{category} from {lead.source} evidence ({lead.kind})"]
    if sig is not None:
        parts.append(f"signature {sig.id}: {sig.explanation}")
    if blamed:
        parts.append(f"implicating {blamed}")
    if category is Category.APP_ERROR:
        parts.append("the application is at fault; no hardware is blamed")
    elif not drain:
        parts.append("nothing is drained" if blamed else "no node is blamed")
    if count > 1:
        parts.append(f"{count} anomalies weighed")
    return "; ".join(parts)
