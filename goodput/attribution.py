"""Attribution: from the anomalies of one incident to a category and the culprits.

Pure: the same anomalies and job description always give the same attribution. The signature
catalogue (goodput.signatures) gives each log-derived anomaly a category and precedence; here the
evidence of a whole incident is weighed, root causes over knock-on effects, and the application is
blamed (and no node drained) when the evidence says the application is at fault.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.models import (
    Anomaly,
    AnomalyKind,
    Attribution,
    Category,
    Culprit,
    CulpritKind,
)
from goodput.scheduler import JobInfo

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


def category_of(anomaly: Anomaly) -> Category:
    return anomaly.category or _KIND_DEFAULTS[anomaly.kind][0]


def attribute(anomalies: Sequence[Anomaly], job: JobInfo | None = None) -> Attribution:
    """Weigh all the evidence of one incident; the strongest root cause decides."""
    if not anomalies:
        return Attribution(category=Category.UNKNOWN, explanation="no evidence", restart=False)
    ranked = sorted(anomalies, key=lambda a: (-PRECEDENCE[category_of(a)], a.observed_at, a.id))
    lead = ranked[0]
    category = category_of(lead)
    restart, drain = _CATEGORY_DEFAULTS[category]
    supporting = [a for a in ranked if category_of(a) == category]

    culprits: list[Culprit] = []
    if drain:
        nodes = list(dict.fromkeys(n for a in supporting for n in a.nodes))
        if not nodes:
            drain = False
        culprits += [Culprit(kind=CulpritKind.NODE, id=n, confidence=0.9 if len(nodes) == 1 else 0.6)
                     for n in nodes]
        culprits += [Culprit(kind=CulpritKind.GPU, id=g, confidence=0.8)
                     for g in dict.fromkeys(g for a in supporting for g in a.gpus)]
    elif category is Category.APP_ERROR:
        culprits.append(Culprit(kind=CulpritKind.APP, id=job.name if job and job.name else "application",
                                confidence=0.8))
    ranks = list(dict.fromkeys(r for a in supporting for r in a.ranks))
    culprits += [Culprit(kind=CulpritKind.RANK, id=f"rank {r}", confidence=0.5) for r in ranks[:8]]

    signatures = tuple(dict.fromkeys(s for a in ranked for s in a.signature_ids))
    explanation = _explain(category, lead, culprits, len(anomalies), drain)
    return Attribution(category=category, culprits=tuple(culprits), explanation=explanation,
                       restart=restart, drain=drain, signature_ids=signatures)


def _explain(category: Category, lead: Anomaly, culprits: Sequence[Culprit], count: int,
             drain: bool) -> str:
    blamed = ", ".join(c.id for c in culprits if c.kind in (CulpritKind.NODE, CulpritKind.GPU))
    parts = [f"{category} from {lead.source} evidence ({lead.kind})"]
    if blamed:
        parts.append(f"implicating {blamed}")
    if category is Category.APP_ERROR:
        parts.append("the application is at fault; no hardware is blamed")
    elif not drain:
        parts.append("no node is blamed")
    if count > 1:
        parts.append(f"{count} anomalies weighed")
    return "; ".join(parts)
