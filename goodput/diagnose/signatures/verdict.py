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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from pydantic import Field

from goodput.diagnose.signatures.circumstances import Circumstances
from goodput.diagnose.signatures.confidence import Confidence, Ingredients, grade
from goodput.diagnose.signatures.crossline import (
    collective_mismatch,
    driver_hang,
    recurring_app_xid,
    same_host_peer,
    silent_rank,
    single_node_local_rank,
)
from goodput.diagnose.signatures.locate import Locator, node_of
from goodput.diagnose.signatures.model import ROLE_ORDER, Match, Role, Signature
from goodput.diagnose.signatures.naming import clip, name, pick, reporting_rank
from goodput.diagnose.signatures.nodeplatform import NodePlatform
from goodput.diagnose.signatures.stalls import Stalls
from goodput.models import Category, CulpritKind, Frozen, RestartEffect

MAX_HITS_PER_SIGNATURE = 20
MAX_EVIDENCE = 8
MAX_EVIDENCE_CHARS = 512
MAX_TIMEOUTS = 1000
# A root cause of another category this close in precedence makes the verdict less than certain.
RIVAL_MARGIN = 10
# The culprit offline when the log does not spell its host: whoever produced the log.
SOURCE_NODE = "the node that produced this log"
_TIMEOUT_ID = "nccl-watchdog-timeout"
_MISMATCH_ID = "nccl-collective-mismatch"
# A launcher that kills a hung rank itself (NVRx's rank monitor) leaves exit code -9: not the OOM killer.
_LAUNCHER_KILLS = frozenset({"nvrx-heartbeat-timeout", "nvrx-section-timeout"})
_SIGKILL_IDS = frozenset({"torchrun-exit-sigkill", "deepspeed-exit-sigkill"})
# torchrun's failure summary: "Failures:" lists the other ranks' exits, then the root cause.
_OTHER_FAILURES_ID = "torchrun-other-failures"
_ROOT_CAUSE_ID = "torchrun-root-cause"
# A task the kernel reports stuck in D state, and a stack frame in the NVIDIA driver.
_STUCK_TASK_ID = "kernel-task-d-state"
_DRIVER_FRAME_ID = "kernel-nvidia-frame"
# A local port error names no host when the log lost it; the peers' completion errors point at it.
_PORT_ERROR_ID = "nccl-ib-port-error"
# A stall whose deciding line names nobody takes its culprit from the stall's multi-line evidence.
_STALLS = frozenset({Category.HANG, Category.NCCL_TIMEOUT})
# Categories whose lines after a Slurm termination banner are consequences of the termination.
_TEARDOWN = frozenset({Category.APP_ERROR, Category.OOM, Category.NCCL_TIMEOUT, Category.NETWORK,
                       Category.HANG, Category.STORAGE, Category.UNKNOWN})


class Evidence(Frozen):
    line: int = Field(ge=0)
    text: str


class Verdict(Frozen):
    """The classification of one log; the JSON of `goodput classify --json` minus the path."""

    category: Category
    culprit_kind: CulpritKind
    culprit: str | None = None
    restart: bool
    drain: bool
    signatures: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    explanation: str
    # Machine-readable parts of the culprit, for building anomalies; not in the CLI's JSON.
    host: str | None = None
    gpu: str | None = None
    rank: int | None = None
    restart_effect: RestartEffect = RestartEffect.NONE
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
        self._hits: list[Match] = []
        self._per_sig: dict[str, int] = {}
        self._terminated_at: int | None = None
        self._mismatch = mismatch
        self._timeouts: list[Match] = []
        # The last hit of each restart effect seen (what the launcher did about the failure).
        self._effects: dict[RestartEffect, Match] = {}
        self._launcher_kill_at: int | None = None
        # Kernel reports of stuck tasks and lines of NVIDIA driver frames (locators, bounded).
        self._stuck: list[Match] = []
        self._driver_frames: list[int] = []
        # Line spans of torchrun's "Failures:" sections (other ranks' exits: teardown, not causes).
        self._others_from: int | None = None
        self._others: list[tuple[int, int]] = []
        self._voided: set[str] = set()

    def add(self, match: Match) -> None:
        match = self.locator.observe(match)
        self.circumstances.observe(match)
        self.stalls.observe(match)
        self.platform.observe(match)
        sig = match.signature
        self._voided.update(sig.voids)
        if sig.terminates and self._terminated_at is None:
            self._terminated_at = match.line_no
        if sig.restart_effect is not RestartEffect.NONE:
            self._effects[sig.restart_effect] = match
        cancel = self.circumstances.owner_cancel
        if cancel is not None and RestartEffect.NEVER not in self._effects:
            self._effects[RestartEffect.NEVER] = cancel
        if sig.id in _LAUNCHER_KILLS and self._launcher_kill_at is None:
            self._launcher_kill_at = match.line_no
        if sig.id == _OTHER_FAILURES_ID:
            self._others_from = match.line_no
        elif sig.id == _ROOT_CAUSE_ID and self._others_from is not None:
            if len(self._others) < MAX_TIMEOUTS:
                self._others.append((self._others_from, match.line_no))
            self._others_from = None
        if sig.id == _STUCK_TASK_ID and len(self._stuck) < MAX_HITS_PER_SIGNATURE:
            self._stuck.append(match)
        elif sig.id == _DRIVER_FRAME_ID and len(self._driver_frames) < MAX_TIMEOUTS:
            self._driver_frames.append(match.line_no)
        if sig.role is Role.LOCATOR:
            return
        if sig.id == _TIMEOUT_ID and len(self._timeouts) < MAX_TIMEOUTS:
            self._timeouts.append(match)
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

    def _in_other_failures(self, line_no: int) -> bool:
        """Whether a line lies in a torchrun summary's "Failures:" section (the other ranks' exits)."""
        return any(lo < line_no < hi for lo, hi in self._others)

    def role_of(self, match: Match) -> Role:
        sig = match.signature
        if sig.id in self._voided:
            return Role.INFO
        if sig.id in _SIGKILL_IDS and self._in_other_failures(match.line_no):
            # The agent's own SIGKILL of the surviving workers (after SIGTERM's grace period), not
            # the OOM killer: it says nothing about why the job failed.
            return Role.INFO
        if sig.role is Role.ROOT and self._in_other_failures(match.line_no):
            return Role.KNOCK_ON
        if sig.id in _SIGKILL_IDS and self._launcher_kill_at is not None and match.line_no > self._launcher_kill_at:
            return Role.KNOCK_ON
        if (self._terminated_at is not None and match.line_no > self._terminated_at
                and not sig.terminates and sig.role is Role.ROOT and sig.category in _TEARDOWN):
            return Role.KNOCK_ON
        return sig.role

    def _key(self, match: Match) -> tuple[int, int, int]:
        return (ROLE_ORDER[self.role_of(match)], match.signature.precedence, -match.line_no)

    def _collective_mismatch(self) -> Match | None:
        signature = self._mismatch or _default_mismatch()
        return collective_mismatch(self._timeouts, signature, reporting_rank) if signature else None

    def build(self) -> Verdict:
        mismatch = self._collective_mismatch()
        if mismatch is not None:
            self._hits.append(mismatch)
        for synthesized in (recurring_app_xid(self._hits), driver_hang(self._stuck, self._driver_frames),
                            same_host_peer(self._hits, self.locator.name_of)):
            if synthesized is not None:
                self._hits.append(synthesized)
        self._hits += self.circumstances.synthesize(self._hits, self._timeouts, reporting_rank)
        self._hits += self.stalls.synthesize()
        self._hits += self.platform.synthesize(stalled=self.stalls.stalled)
        if not self._hits:
            confidence, settle = grade(Ingredients(
                category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, culprit_named=False,
                from_source_node=False, root_cause=False, any_hit=False, rival=None))
            effect = self.net_effect()
            said = self._effects.get(effect)
            explanation = ("no known failure signature in the log" if said is None else
                           f"No failure line, but line {said.line_no} ({said.signature.id}): "
                           f"{said.signature.explanation}")
            return Verdict(category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, restart=False,
                           drain=False, explanation=explanation, confidence=confidence, settle=settle,
                           signatures=tuple(dict.fromkeys(m.signature.id for m in self._effects.values())),
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
        kind, culprit, host, rank, placed = self._placed(lead, kind, culprit, host, rank)
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
        evidence = self._evidence(lead, supporting, consequences)
        others = [h for h in dict.fromkeys(self.locator.host_of(m) for m in supporting
                                           if m.signature.culprit_kind is sig.culprit_kind) if h and h != host]
        explanation = self._explain(lead, lead_role, kind, culprit, host, drain, consequences)
        if placed:
            explanation += f" The culprit is named from line {placed[0]}: {placed[1]}"
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
        restart, why_not = self._restart(sig.restart)
        fabric = self.circumstances.fabric_configuration(sig) if restart else None
        if fabric is not None:
            restart, why_not = False, fabric
        if why_not:
            explanation += " " + why_not
        confidence, settle = grade(Ingredients(
            category=sig.category, culprit_kind=kind, culprit_named=culprit not in (None, SOURCE_NODE),
            from_source_node=culprit == SOURCE_NODE, root_cause=lead_role is Role.ROOT, any_hit=True,
            rival=self._rival(lead, ranked), inferred=silent is not None or odd is not None,
            confirm=placed[2] if placed and culprit is not None else None, sourced=bool(sig.source),
            drain_unplaced=drain and host is None, unsettled=not sig.settles))
        return Verdict(category=sig.category, culprit_kind=kind, culprit=culprit, restart=restart,
                       drain=drain, signatures=signatures, evidence=evidence, explanation=explanation,
                       host=host, gpu=gpu, rank=rank, confidence=confidence, settle=settle,
                       catalogue_version=self.catalogue_version, restart_effect=self.net_effect())

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
                       signatures=ids, evidence=self._evidence(lead, [lead], ranked[1:]), explanation=explanation,
                       confidence=confidence, settle=settle, catalogue_version=self.catalogue_version,
                       restart_effect=self.net_effect())

    def net_effect(self) -> RestartEffect:
        """What the lines so far say about restarting: never beats everything; an in-job restart
        counts until the launcher gives up after it."""
        if RestartEffect.NEVER in self._effects:
            return RestartEffect.NEVER
        in_job = self._effects.get(RestartEffect.IN_JOB)
        gave_up = self._effects.get(RestartEffect.GAVE_UP)
        if in_job is not None and (gave_up is None or gave_up.line_no < in_job.line_no):
            return RestartEffect.IN_JOB
        return RestartEffect.GAVE_UP if gave_up is not None else RestartEffect.NONE

    def _restart(self, wanted: bool) -> tuple[bool, str | None]:
        """The cluster's restart decision: the cause's, unless the job's launcher already restarted it
        in-job (and did not give up afterwards) or the job asked never to be restarted."""
        if not wanted:
            return False, None
        never = self._effects.get(RestartEffect.NEVER)
        if never is not None:
            return False, (f"Not restarted: line {never.line_no} ({never.signature.id}) says so. "
                           f"{never.signature.explanation}")
        in_job = self._effects.get(RestartEffect.IN_JOB)
        gave_up = self._effects.get(RestartEffect.GAVE_UP)
        if in_job is not None and (gave_up is None or gave_up.line_no < in_job.line_no):
            return False, (f"The job's own launcher restarted it in-job (line {in_job.line_no}) and did not give "
                           "up afterwards; a cluster restart on top would be a double restart.")
        return True, None

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

    def _placed(self, lead: Match, kind: CulpritKind, culprit: str | None, host: str | None, rank: int | None
                ) -> tuple[CulpritKind, str | None, str | None, int | None, tuple[int, str, str | None] | None]:
        """A culprit other lines name better than the deciding one: torchrun's root cause over a rank
        its summary lists as teardown, the one task Slurm did not terminate, the node whose dead port
        its peers' completion errors point at. The last value says which line, why, and what would
        confirm a culprit that is inferred rather than stated."""
        if kind in (CulpritKind.APP, CulpritKind.RANK):
            root = self.locator.root_cause
            if root is not None and (rank is None or self._in_other_failures(lead.line_no)):
                return kind, f"rank {root[0]}", node_of(root[1]) or host, root[0], (
                    lead.line_no, f"torchrun's summary names rank {root[0]} as the first observed failure; "
                                  "the other exits it lists are the agent tearing the group down.", None)
            failed = self.circumstances.failed_task() if rank is None else None
            if failed is not None:
                return kind, f"rank {failed[0]}", node_of(failed[1]) or host, failed[0], (
                    lead.line_no, f"task {failed[0]} is the only one missing from the tasks Slurm terminated "
                                  "after the failure, so it is the task that failed.",
                    f"task {failed[0]}'s own output (its last lines before it exited) and sacct's record of "
                    "the step confirm which task failed first")
        if lead.signature.id == _PORT_ERROR_ID and host is None:
            peers = {m.groups["peer"] for m in self._hits
                     if m.groups.get("peer") and m.signature.category is Category.NETWORK}
            if len(peers) == 1:
                node = node_of(clip(peers.pop()))
                return CulpritKind.NODE, node, node, rank, (
                    lead.line_no, f"the port error's own host is not in the log, but its peers' errors all "
                                  f"point at {node}.",
                    f"the kernel log or `ibstat` of {node} showing the port going down confirms it")
            # A link event that no line ties to one host: the fabric between them is the suspect.
            return CulpritKind.NETWORK, culprit, host, rank, None
        return kind, culprit, host, rank, None

    def _evidence(self, lead: Match, supporting: list[Match], consequences: list[Match]
                  ) -> tuple[Evidence, ...]:
        """The deciding line, a little support, then one line of each other signature, by rank."""
        chosen: dict[int, str] = {lead.line_no: lead.text}
        for m in supporting[1:3]:
            chosen.setdefault(m.line_no, m.text)
        seen: set[str] = set()
        for m in consequences:
            if len(chosen) >= MAX_EVIDENCE:
                break
            if m.signature.id not in seen:
                seen.add(m.signature.id)
                chosen.setdefault(m.line_no, m.text)
        return tuple(Evidence(line=n, text=clip(t)) for n, t in sorted(chosen.items()))

    def _explain(self, lead: Match, role: Role, kind: CulpritKind, culprit: str | None,
                 host: str | None, drain: bool, consequences: list[Match]) -> str:
        sig = lead.signature
        parts = [f"{sig.category} ({sig.id}, line {lead.line_no}): {sig.explanation}"]
        if role is not Role.ROOT:
            parts.append(f"No root-cause signature was found; this is the strongest {role} evidence.")
        if culprit:
            where = f" on {host}" if host and host not in culprit else ""
            parts.append(f"Culprit: {culprit}{where} ({kind}).")
        elif kind not in (CulpritKind.UNKNOWN, CulpritKind.APP):
            parts.append(f"The log does not say which {'link' if kind is CulpritKind.NETWORK else kind} is at fault.")
        if sig.category in (Category.APP_ERROR, Category.OOM):
            parts.append("The application is at fault; no hardware is blamed.")
        if sig.drain and not drain:
            parts.append("No node is drained because the log does not name the failed node.")
        elif drain and host is None:
            parts.append("The log does not name the host: drain the node this log was taken from.")
        if any(self._in_other_failures(m.line_no) for m in consequences):
            parts.append("torchrun's summary lists other ranks' exits before its root cause; those are teardown.")
        if self._terminated_at is not None and any(
                self.role_of(m) is not m.signature.role and m.line_no > self._terminated_at for m in consequences):
            parts.append(f"Slurm ended the job at line {self._terminated_at}; errors after it are "
                         "treated as teardown.")
        if consequences:
            ids = ", ".join(dict.fromkeys(m.signature.id for m in consequences[:50]))
            parts.append(f"{len(consequences)} other line(s) are weaker evidence or consequences ({ids}).")
        return " ".join(parts)


def _default_mismatch() -> Signature | None:
    from goodput.diagnose.signatures import default_catalogue  # the package imports this module's siblings

    return default_catalogue().get(_MISMATCH_ID)
