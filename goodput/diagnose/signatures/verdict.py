"""Weighing the hits of one log into a verdict: what failed, who is to blame, restart? drain?

Rules, in order: a root cause beats a knock-on effect beats an informational hit; among equals the
higher catalogue precedence wins (hardware explains software symptoms); among those the earliest
line wins (the first rank to fail is the culprit, the others die of the teardown). Application
errors printed after Slurm ended the job (time limit, preemption, cancel) are teardown noise.
The culprit is named whenever the log lets a careful reader name it (`naming`); whether a node
must go is the deciding signature's call, made even when the log does not spell the host (a GPU
fault is printed on its own node). What the job was doing when it failed can change the reading
(`circumstances`). Every number taken from a line is bounded before it is converted, and every
name shown is clipped: a hostile line changes nothing but its own hit.

The builder decides; its parts live beside it: which hits are teardown (`teardown`), what the
launcher did about restarting (`effects`), a culprit named from other lines (`placement`), and what
the verdict shows (`explain`). `Evidence` and the bounds are re-exported here for callers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from goodput.diagnose.signatures.circumstances import Circumstances
from goodput.diagnose.signatures.confidence import Confidence, Ingredients, grade
from goodput.diagnose.signatures.crossline import (
    RERUN_SUSPECT_ID,
    collective_mismatch,
    driver_hang,
    megatron_on_suspect,
    ranks_behind,
    recurring_app_xid,
    same_host_peer,
    silent_rank,
    single_node_local_rank,
)
from goodput.diagnose.signatures.effects import Effects
from goodput.diagnose.signatures.explain import MAX_EVIDENCE, MAX_EVIDENCE_CHARS, Evidence, evidence, explain
from goodput.diagnose.signatures.jax_tasks import TASK_LINE_ID, unhealthy_named
from goodput.diagnose.signatures.locate import Locator, node_of
from goodput.diagnose.signatures.model import ROLE_ORDER, Match, Role, Signature
from goodput.diagnose.signatures.naming import name, pick, reporting_rank
from goodput.diagnose.signatures.nodeplatform import NodePlatform
from goodput.diagnose.signatures.placement import Placement, placed
from goodput.diagnose.signatures.smi_ecc import VolatileEcc
from goodput.diagnose.signatures.stalls import Stalls
from goodput.diagnose.signatures.teardown import Teardown
from goodput.models import Category, CulpritKind, Frozen, RestartEffect

__all__ = ["MAX_EVIDENCE", "MAX_EVIDENCE_CHARS", "MAX_HITS_PER_SIGNATURE", "MAX_TIMEOUTS", "RIVAL_MARGIN",
           "SOURCE_NODE", "Evidence", "Verdict", "VerdictBuilder"]

MAX_HITS_PER_SIGNATURE = 20
MAX_TIMEOUTS = 1000
# A root cause of another category this close in precedence makes the verdict less than certain.
RIVAL_MARGIN = 10
# The culprit offline when the log does not spell its host: whoever produced the log.
SOURCE_NODE = "the node that produced this log"
_TIMEOUT_ID = "nccl-watchdog-timeout"
# PyTorch's per-rank progress lines after a timeout (last enqueued / completed work).
_PROGRESS_IDS = frozenset({"nccl-watchdog-status", "nccl-dump-signal"})
_MISMATCH_ID = "nccl-collective-mismatch"
# A task the kernel reports stuck in D state, and a stack frame in the NVIDIA driver.
_STUCK_TASK_ID = "kernel-task-d-state"
_DRIVER_FRAME_ID = "kernel-nvidia-frame"
# A stall whose deciding line names nobody takes its culprit from the stall's multi-line evidence.
_STALLS = frozenset({Category.HANG, Category.NCCL_TIMEOUT})


class Verdict(Frozen):
    """The classification of one log; the JSON of `goodput classify --json` minus the path."""

    category: Category
    culprit_kind: CulpritKind
    culprit: str | None = None
    restart: bool
    drain: bool
    # Restart away from the culprit's host, which stays in service (the deciding signature's call,
    # only when the log names the host).
    exclude: bool = False
    signatures: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    explanation: str
    # Machine-readable parts of the culprit, for building anomalies; not in the CLI's JSON.
    host: str | None = None
    gpu: str | None = None
    rank: int | None = None
    restart_effect: RestartEffect = RestartEffect.NONE
    # Why the log's circumstances hold back a restart its rule allows (a fabric configuration fault
    # that an unchanged restart repeats); None when nothing does. Carried to the live service.
    held_back: str | None = None
    confidence: Confidence = Confidence.LOW
    # Below high confidence: the evidence that would settle the question.
    settle: str | None = None
    catalogue_version: int = 1


class VerdictBuilder:
    """Consumes hits in line order (streaming, bounded memory) and produces one verdict."""

    def __init__(self, catalogue_version: int = 1, *, mismatch: Signature | None = None) -> None:
        """`mismatch`: the collective-mismatch entry to synthesise when timeouts disagree (by default
        the packaged catalogue's)."""
        self.catalogue_version = catalogue_version
        self.locator = Locator()
        self.circumstances = Circumstances()
        self.stalls = Stalls()
        self.platform = NodePlatform()
        self.ecc = VolatileEcc()
        self.teardown = Teardown()
        self.effects = Effects()
        self._hits: list[Match] = []
        self._per_sig: dict[str, int] = {}
        self._mismatch = mismatch
        self._timeouts: list[Match] = []
        self._progress: list[Match] = []
        # Kernel reports of stuck tasks and lines of NVIDIA driver frames (locators, bounded).
        self._stuck: list[Match] = []
        self._driver_frames: list[int] = []
        # GPUs Megatron's rerun state machine named as suspect (locators, bounded).
        self._rerun_suspects: list[Match] = []
        # JAX task names on lines of their own (locators, bounded).
        self._task_lines: list[Match] = []

    def add(self, match: Match) -> None:
        match = self.locator.observe(match)
        self.circumstances.observe(match)
        self.stalls.observe(match)
        self.platform.observe(match)
        self.ecc.observe(match)
        self.teardown.observe(match)
        self.effects.observe(match, self.circumstances.owner_cancel)
        sig = match.signature
        if sig.id == _STUCK_TASK_ID and len(self._stuck) < MAX_HITS_PER_SIGNATURE:
            self._stuck.append(match)
        elif sig.id == _DRIVER_FRAME_ID and len(self._driver_frames) < MAX_TIMEOUTS:
            self._driver_frames.append(match.line_no)
        elif sig.id == RERUN_SUSPECT_ID and len(self._rerun_suspects) < MAX_HITS_PER_SIGNATURE:
            self._rerun_suspects.append(match)
        elif sig.id == TASK_LINE_ID and len(self._task_lines) < MAX_HITS_PER_SIGNATURE:
            self._task_lines.append(match)
        if sig.role is Role.LOCATOR:
            return
        if sig.id == _TIMEOUT_ID and len(self._timeouts) < MAX_TIMEOUTS:
            self._timeouts.append(match)
        elif sig.id in _PROGRESS_IDS and len(self._progress) < MAX_TIMEOUTS:
            # Only the head of the line is read (its group and its last enqueued work): hold no more.
            self._progress.append(dataclasses.replace(match, text=match.text[:2 * MAX_EVIDENCE_CHARS]))
        count = self._per_sig.get(sig.id, 0)
        self._per_sig[sig.id] = count + 1
        if count < MAX_HITS_PER_SIGNATURE:
            if len(match.text) > 2 * MAX_EVIDENCE_CHARS:
                # Only a clipped excerpt is ever shown; never hold thousands of 64 KiB lines.
                match = dataclasses.replace(match, text=match.text[:2 * MAX_EVIDENCE_CHARS])
            self._hits.append(match)

    def add_all(self, matches: Iterable[Match]) -> VerdictBuilder:
        for m in matches:
            self.add(m)
        return self

    def role_of(self, match: Match) -> Role:
        return self.teardown.role_of(match)

    def _key(self, match: Match) -> tuple[int, int, int]:
        return (ROLE_ORDER[self.role_of(match)], match.signature.precedence, -match.line_no)

    def _collective_mismatch(self) -> Match | None:
        signature = self._mismatch or _default_mismatch()
        return collective_mismatch(self._timeouts, signature, reporting_rank) if signature else None

    def build(self) -> Verdict:
        mismatch = self._collective_mismatch()
        if mismatch is not None:
            self._hits.append(mismatch)
        behind = ranks_behind(self._timeouts, self._progress, reporting_rank) if mismatch is None else None
        for synthesized in (recurring_app_xid(self._hits), driver_hang(self._stuck, self._driver_frames),
                            same_host_peer(self._hits, self.locator.name_of), behind,
                            megatron_on_suspect(self._hits, self._rerun_suspects),
                            unhealthy_named(self._hits, self._task_lines)):
            if synthesized is not None:
                self._hits.append(synthesized)
        self._hits += self.circumstances.synthesize(self._hits, self._timeouts, reporting_rank)
        self._hits += self.stalls.synthesize()
        self._hits += self.platform.synthesize(stalled=self.stalls.stalled)
        self._hits += self.ecc.synthesize()
        if not self._hits:
            confidence, settle = grade(Ingredients(
                category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, culprit_named=False,
                from_source_node=False, root_cause=False, any_hit=False, rival=None))
            effect = self.net_effect()
            said = self.effects.said(effect)
            explanation = ("no known failure signature in the log" if said is None else
                           f"No failure line, but line {said.line_no} ({said.signature.id}): "
                           f"{said.signature.explanation}")
            return Verdict(category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, restart=False,
                           drain=False, explanation=explanation, confidence=confidence, settle=settle,
                           signatures=self.effects.ids(),
                           catalogue_version=self.catalogue_version, restart_effect=effect)
        ranked = sorted(self._hits, key=self._key, reverse=True)
        lead = ranked[0]
        lead_role = self.role_of(lead)
        sig = lead.signature
        if lead_role is Role.INFO:
            return self._informational(ranked)
        supporting = [m for m in ranked
                      if m.signature.category == sig.category and self.role_of(m) is lead_role]
        kind, culprit, host, gpu, rank = pick(supporting, self.locator)
        placement: Placement | None
        kind, culprit, host, rank, placement = placed(
            lead, kind, culprit, host, rank, locator=self.locator, circumstances=self.circumstances,
            teardown=self.teardown, hits=self._hits)
        only = self.platform.only_gpu(host) if gpu is None and sig.culprit_kind is CulpritKind.GPU else None
        if only is not None and kind in (CulpritKind.GPU, CulpritKind.NODE):  # a node with one GPU: that one
            kind, gpu, culprit = CulpritKind.GPU, only, f"{host} GPU {only}" if host else f"GPU {only}"
        if kind in (CulpritKind.APP, CulpritKind.RANK) and len(self.locator.hosts) <= 1:
            if culprit is None:
                # The rank the launcher saw fail (or killed, hung) is the culprit on a one-node log.
                rank = single_node_local_rank(ranked)
                culprit = f"rank {rank}" if rank is not None else None
            if rank is not None and host is None and self.locator.hosts:
                host = node_of(next(iter(self.locator.hosts)))  # the only host the log shows ran every rank
        # Whether the node must go is the signature's call; naming it is a separate question. A GPU
        # fault is printed on the GPU's own node, so a log that does not spell its host still says
        # which node: the one that produced it (live, the watcher or push stream knows which that
        # is, and attribution checks it is the job's). A node fault seen from elsewhere (Slurm's
        # NODE FAILURE banner on the batch host) names nothing, and nothing is drained for it. An
        # application fault that wedges the GPU (Xid 31 from an unrecognized client) blames the
        # program and still drains the node for a reset.
        drain = sig.drain and (host is not None or sig.source_local)
        if drain and culprit is None and kind in (CulpritKind.GPU, CulpritKind.NODE):
            kind, culprit = CulpritKind.NODE, SOURCE_NODE
        # Everything that did not decide: weaker causes, consequences, informational hits.
        supporting_ids = {id(m) for m in supporting}
        consequences = [m for m in ranked if id(m) not in supporting_ids]
        signatures = tuple(dict.fromkeys(m.signature.id for m in ranked))
        shown = evidence(lead, supporting, consequences)
        others = [h for h in dict.fromkeys(self.locator.host_of(m) for m in supporting
                                           if m.signature.culprit_kind is sig.culprit_kind) if h and h != host]
        explanation = explain(lead, lead_role, kind, culprit, host, drain, consequences, self.teardown)
        if placement:
            explanation += f" The culprit is named from line {placement[0]}: {placement[1]}"
        silent = None
        if sig.id == _TIMEOUT_ID and kind is CulpritKind.UNKNOWN:
            silent = silent_rank(self._timeouts, reporting_rank)
            if silent is not None:
                kind, rank, culprit = CulpritKind.RANK, silent.rank, f"rank {silent.rank}"
                host = self.locator.node_of_rank(silent.rank)
                explanation += (f" {silent.reporters} ranks timed out in {silent.op} #{silent.seq} and rank "
                                f"{silent.rank} is the only one below them that did not: the others were "
                                "waiting for it.")
        odd = self.stalls.culprit() if kind is CulpritKind.UNKNOWN and sig.category in _STALLS else None
        if odd is not None:  # a stall no line names: the stacks or GPU table show the odd one out
            kind, culprit, host, gpu, rank = name(odd.match.signature.culprit_kind, odd.match, self.locator)
            explanation += f" {odd.reason}"
        if others and kind in (CulpritKind.GPU, CulpritKind.NODE):
            explanation += f" The same kind of fault is also reported on {', '.join(others[:5])}."
        restart, why_not = self.effects.restart(sig.restart)
        fabric = self.circumstances.fabric_configuration(sig) if restart else None
        if fabric is not None:
            restart, why_not = False, fabric
        if why_not:
            explanation += " " + why_not
        confidence, settle = grade(Ingredients(
            category=sig.category, culprit_kind=kind, culprit_named=culprit not in (None, SOURCE_NODE),
            from_source_node=culprit == SOURCE_NODE, root_cause=lead_role is Role.ROOT, any_hit=True,
            rival=self._rival(lead, ranked), inferred=silent is not None or odd is not None,
            confirm=placement[2] if placement and culprit is not None else None, sourced=bool(sig.source),
            drain_unplaced=drain and host is None, unsettled=not sig.settles))
        return Verdict(category=sig.category, culprit_kind=kind, culprit=culprit, restart=restart, drain=drain,
                       exclude=sig.exclude and restart and host is not None, signatures=signatures,
                       evidence=shown, explanation=explanation, host=host, gpu=gpu, rank=rank,
                       confidence=confidence, settle=settle, catalogue_version=self.catalogue_version,
                       restart_effect=self.net_effect(), held_back=fabric)

    def _informational(self, ranked: list[Match]) -> Verdict:
        """Only lines that never decide alone (a corrected ECC error, a recovered warning, Xid 63):
        reported, but nothing in them ended the job, so nothing is restarted or drained."""
        ids = tuple(dict.fromkeys(m.signature.id for m in ranked))
        lead = ranked[0]
        explanation = (f"No failure: only informational lines ({', '.join(ids[:10])}). Line {lead.line_no}: "
                       f"{lead.signature.explanation}")
        confidence, settle = grade(Ingredients(
            category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, culprit_named=False,
            from_source_node=False, root_cause=False, any_hit=True, rival=None, informational=True))
        return Verdict(category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, restart=False, drain=False,
                       signatures=ids, evidence=evidence(lead, [lead], ranked[1:]), explanation=explanation,
                       confidence=confidence, settle=settle, catalogue_version=self.catalogue_version,
                       restart_effect=self.net_effect())

    def net_effect(self) -> RestartEffect:
        """What the lines so far say about restarting (see `Effects.net`)."""
        return self.effects.net()

    def _rival(self, lead: Match, ranked: list[Match]) -> Category | None:
        """The category of another cause that nearly decided, if any."""
        if self.role_of(lead) is not Role.ROOT:
            return None
        for m in ranked[1:]:
            if self.role_of(m) is not Role.ROOT or m.signature.precedence < lead.signature.precedence - RIVAL_MARGIN:
                return None
            if m.signature.category not in (lead.signature.category, Category.UNKNOWN):
                return m.signature.category
        return None


def _default_mismatch() -> Signature | None:
    from goodput.diagnose.signatures import default_catalogue  # the package imports this module's siblings

    return default_catalogue().get(_MISMATCH_ID)
