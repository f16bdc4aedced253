"""Confidence, and the deciding rule, for evidence that is not a job's log.

Earned autonomy lets a rule act alone only on a `high` verdict. Log verdicts are graded by
goodput.diagnose.signatures.confidence; the node's own evidence (the node agent's kernel-log Xid,
NVML or DCGM health, NVSentinel's event, Slurm's view of a node or a job) carried no grade, so
under earned autonomy it could never act alone even where its meaning is documented. Here each
source is graded from its documented semantics:

* an Xid, by NVIDIA's immediate-action bucket in the Xid catalogue (the same table the log rules
  are generated from, so the rule id is the log path's `xid-N` and both build one record);
* NVML/DCGM health: a fatal finding (GPU lost, uncorrectable ECC, row-remap failure, a driver
  recovery action) is `high`, a warning `low`;
* NVSentinel, by its recommended action for a fatal event;
* Slurm, by the catalogue's Slurm rules (slurm.toml) over the node's reason or the job's state:
  a documented reason or state is `high` (`medium` where the rule says it does not settle the
  verdict), one no rule knows `medium` for a dead node (Slurm's fact, not its cause).

Pure and deterministic; the detectors call it as they build anomalies.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from goodput.diagnose.signatures import Catalogue, default_catalogue
from goodput.diagnose.signatures.vendor import Decision, load_table
from goodput.models import Frozen

Level = Literal["high", "medium", "low"]


class Grade(Frozen):
    """How sure a piece of node evidence is, and the rule whose record it counts towards ("" when
    its signature ids already name the rule, or none does and the verdict's category decides)."""

    confidence: Level
    rule: str = ""


_BY_DECISION: dict[Decision, Level] = {
    Decision.DRAIN: "high",    # RESET_GPU, RESTART_BM, CONTACT_SUPPORT, ...: the GPU or node needs action
    Decision.JOB: "high",      # RESTART_APP: the application's, documented as such
    Decision.CONTEXT: "medium",  # the number alone does not decide (Xid 45, 144-150, 154)
    Decision.NONE: "low",      # IGNORE or no bucket stated: decides nothing
}


@cache
def _xid_decisions() -> dict[int, Decision]:
    table = load_table()
    return {row.code: table.bucket(row.immediate).decision for row in table.rows}


def xid_grade(code: int) -> Grade:
    """An Xid read off the node (kernel log, NVML's event set, DCGM), graded by its NVIDIA bucket;
    its rule is `xid-N`, as for the same Xid in a job's log. An Xid the catalogue lacks is `low`."""
    decision = _xid_decisions().get(code)
    return Grade(confidence=_BY_DECISION[decision] if decision is not None else "low", rule=f"xid-{code}")


def gpu_health_grade(rule: str, *, critical: bool) -> Grade:
    """An NVML or DCGM health finding (`gpu-lost`, `ecc-uncorrectable`, `row-remap-failure`,
    `recovery-action`, ...): NVML documents the critical ones as fatal to the GPU, so `high`; the
    warnings (pending remaps, clock slowdowns, idle or slow GPUs) are hints, `low`."""
    return Grade(confidence="high" if critical else "low", rule=f"gpu-health:{rule}")


# NVSentinel's recommended action for a fatal event (health_event.proto RecommendedAction): what
# its health monitor decided the component needs. A reset, a reboot, a replacement or support
# says the hardware is at fault (or, RESTART_APP, that it is not); a diagnostic still to run, an
# action this release does not know, or none, leaves the question open.
_NVSENTINEL: dict[str, Level] = {
    "COMPONENT_RESET": "high", "RESTART_BM": "high", "RESTART_VM": "high", "REPLACE_VM": "high",
    "CONTACT_SUPPORT": "high", "RESTART_APP": "high",
    "RUN_FIELDDIAG": "medium", "RUN_DCGMEUD": "medium", "UNKNOWN": "medium", "NONE": "medium",
}


def nvsentinel_grade(action: str) -> Grade:
    """A fatal NVSentinel event, graded by its recommended action (its Xid, if any, names the rule)."""
    return Grade(confidence=_NVSENTINEL.get(action, "medium"))


def _slurm_rule(line: str, catalogue: Catalogue | None) -> Grade | None:
    cat = catalogue or default_catalogue()
    hits = [m.signature for m in cat.match_line(line) if m.signature.family in ("slurm", "oom")]
    if not hits:
        return None
    sig = max(hits, key=lambda s: s.rank_key)
    return Grade(confidence="high" if sig.settles else "medium", rule=sig.id)


def slurm_node_grade(reason: str, catalogue: Catalogue | None = None) -> Grade:
    """A node Slurm set down or failed under a running job, graded by the catalogue's Slurm rule for
    its reason (`Not responding`, `Node unexpectedly rebooted`, `Kill task failed`, ...). A reason
    no rule knows (an administrator's words, none at all) is `medium`: Slurm's fact that the node is
    out, not its cause."""
    text = " ".join(reason.split())[:512]
    found = _slurm_rule(f"Reason={text}", catalogue) if text else None
    return found or Grade(confidence="medium")


def slurm_job_grade(state: str, *, nodes_named: bool, catalogue: Catalogue | None = None) -> Grade:
    """A job Slurm ended (NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, ...), graded by the catalogue's rule for
    its state. A node failure whose node Slurm does not name is `medium`: the state does not say
    which; a state no rule knows (FAILED: only the job's exit) is `low`, a consequence."""
    found = _slurm_rule(f"JobState={state}", catalogue)
    if found is None:
        return Grade(confidence="low")
    if found.confidence == "high" and state in ("NODE_FAIL", "BOOT_FAIL") and not nodes_named:
        return found.model_copy(update={"confidence": "medium"})
    return found
