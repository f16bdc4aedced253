"""Stack captures an incident asks of the node agents: the request table, what a node may receive,
what it may send back, and what the answers say. Pure: no clock reads, no I/O.

A hung collective leaves every rank but one waiting in it; stack dumps of the job's processes name
the one elsewhere (`goodput.detect.stack_capture` says how the agent takes them safely). The
service never connects to a node: a hang incident records a request for (job, the nodes Slurm
lists for it), each node's agent learns of it in the response to its own authenticated heartbeat,
captures, and POSTs the result back. So this module holds the rules that keep that channel tight:

* **A node receives only its own requests.** `pending_for(node)` lists requests whose node list
  (Slurm's, never anything the job printed) holds that node; the HTTP layer calls it with the node
  the heartbeat's token proves, so no node learns of another node's requests.
* **A node answers only its own requests, once.** `answer` refuses a request id it does not know or
  that has expired, a node not in the request, a job id other than the request's; a second answer
  from the same node is a duplicate, accepted and ignored (an agent retrying after a lost reply).
* **Bounded.** At most `MAX_REQUESTS` requests live (the oldest is dropped first), each for at most
  `MAX_NODES` nodes, each gone after its time to live; a result holds at most `MAX_DUMPS` dumps of
  at most `MAX_DUMP_CHARS` characters each (the agent cuts; validation refuses what is longer).
  A dump is job-controlled text: it is only cut and handed to the catalogue's linear-time matchers.
* **The wait is bounded by the caller**: what did not come back in time is named in the evidence
  ("no answer within N s"), and the incident goes on without it.

The table lives in the service process's memory (`workers.stack_requests`): a service restart
loses the open requests and their answers, and an incident waiting on one then records "no
answer" at its bound, as it would for a silent agent.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import Field, model_validator

from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.verdict import VerdictBuilder
from goodput.models import Culprit, CulpritKind, Frozen, JobId, NodeName

MAX_REQUESTS = 256
MAX_NODES = 512
MAX_PENDING_PER_NODE = 8
MAX_DUMPS = 64
MAX_DUMP_CHARS = 64 * 1024
MAX_REASONS = 64
MAX_REASON_CHARS = 300
MAX_RESULT_BYTES = 2 * MAX_DUMP_CHARS * 8  # an HTTP body: a few full dumps, escaped, and the rest
MAX_ANALYSED_LINES = 20_000
_REQUEST_ID = r"^stk-[0-9a-f]{24}$"


class StackResultError(ValueError):
    """An agent's stack result the service will not take; the message says why."""


class StackRequest(Frozen):
    """One incident's ask: dump job `job_id`'s processes on each of `nodes`."""

    id: str = Field(pattern=_REQUEST_ID)
    job_id: JobId
    nodes: tuple[NodeName, ...] = Field(max_length=MAX_NODES)
    created_at: datetime
    expires_at: datetime


class PendingStack(Frozen):
    """What a heartbeat's response carries to a node: the request and the job, nothing else."""

    id: str = Field(pattern=_REQUEST_ID)
    job_id: JobId


class NodeStacks(Frozen):
    """One node's answer (the body of `POST /v1/stacks`); the node itself is the token's, not this."""

    request_id: str = Field(pattern=_REQUEST_ID)
    job_id: JobId
    dumps: dict[int, str] = Field(default_factory=dict, max_length=MAX_DUMPS)
    signalled: tuple[int, ...] = Field(default=(), max_length=4096)
    signal_name: str = Field(default="", max_length=16)
    skipped: tuple[str, ...] = Field(default=(), max_length=MAX_REASONS)
    error: str = Field(default="", max_length=MAX_REASON_CHARS)

    @model_validator(mode="after")
    def _bounded(self) -> NodeStacks:
        for pid, text in self.dumps.items():
            if not 1 < pid <= 4_194_304 or len(text) > MAX_DUMP_CHARS:
                raise ValueError(f"dump of pid {pid}: a pid within 2..4194304 and at most {MAX_DUMP_CHARS} characters")
        if any(len(reason) > MAX_REASON_CHARS for reason in self.skipped):
            raise ValueError(f"a skip reason is at most {MAX_REASON_CHARS} characters")
        return self


def request_id(incident_id: str, job_id: str) -> str:
    """One request per incident and job: asking again (an activity retried) finds the same one."""
    return "stk-" + hashlib.sha256(f"{incident_id}\0{job_id}".encode()).hexdigest()[:24]


def cut(text: str, limit: int = MAX_DUMP_CHARS) -> str:
    """At most `limit` characters, saying so when cut (the agent sends what validation accepts)."""
    return text if len(text) <= limit else text[: limit - 20] + "\n[cut by the agent]"


class StackRequestTable:
    """Open requests and their answers, bounded; every method takes the time from its caller."""

    def __init__(self, *, ttl_s: float, max_requests: int = MAX_REQUESTS) -> None:
        self._ttl = timedelta(seconds=ttl_s)
        self._max = max_requests
        self._requests: OrderedDict[str, StackRequest] = OrderedDict()
        self._answers: dict[str, dict[str, NodeStacks]] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def ask(self, rid: str, job_id: str, nodes: Sequence[str], now: datetime) -> StackRequest:
        """Record a request (or find the one with this id); drops the expired, then the oldest."""
        self.expire(now)
        known = self._requests.get(rid)
        if known is not None:
            return known
        request = StackRequest(id=rid, job_id=job_id, nodes=tuple(dict.fromkeys(nodes))[:MAX_NODES],
                               created_at=now, expires_at=now + self._ttl)
        while len(self._requests) >= self._max:
            old, _ = self._requests.popitem(last=False)
            self._answers.pop(old, None)
        self._requests[rid] = request
        self._answers[rid] = {}
        return request

    def expire(self, now: datetime) -> None:
        for rid in [r.id for r in self._requests.values() if r.expires_at <= now]:
            del self._requests[rid]
            self._answers.pop(rid, None)

    def get(self, rid: str) -> StackRequest | None:
        return self._requests.get(rid)

    def pending_for(self, node: str, now: datetime) -> list[PendingStack]:
        """The live requests naming `node` that it has not answered, oldest first, a few at most."""
        out = []
        for request in self._requests.values():
            if request.expires_at > now and node in request.nodes and node not in self._answers[request.id]:
                out.append(PendingStack(id=request.id, job_id=request.job_id))
                if len(out) >= MAX_PENDING_PER_NODE:
                    break
        return out

    def answer(self, node: str, result: NodeStacks, now: datetime) -> bool:
        """Take `node`'s result; False: a duplicate (ignored). StackResultError: not this node's to answer."""
        request = self._requests.get(result.request_id)
        if request is None or request.expires_at <= now:
            raise StackResultError("no such stack request (unknown, or expired)")
        if node not in request.nodes:
            raise StackResultError("this request is not for this node")
        if result.job_id != request.job_id:
            raise StackResultError("the job id is not the request's")
        answers = self._answers[request.id]
        if node in answers:
            return False
        answers[node] = result
        return True

    def answers(self, rid: str) -> dict[str, NodeStacks]:
        return dict(self._answers.get(rid, {}))

    def complete(self, rid: str) -> bool:
        request = self._requests.get(rid)
        return request is not None and len(self._answers.get(rid, {})) >= len(request.nodes)


class StackEvidence(Frozen):
    """What the captures add to an incident: a line per node, and the odd process out if any."""

    lines: tuple[str, ...] = ()
    culprit: Culprit | None = None
    node: str | None = None
    explanation: str = ""


def describe(node: str, result: NodeStacks | None, waited_s: float) -> str:
    """One evidence line: what `node` returned, or that it did not answer in time."""
    if result is None:
        return f"{node}: no stack dump within {waited_s:g} s"
    parts = []
    if result.dumps:
        parts.append(f"py-spy dumped {len(result.dumps)} process(es)")
    if result.signalled:
        parts.append(f"sent {result.signal_name or 'the dump signal'} to {len(result.signalled)} process(es) "
                     "(faulthandler; the dumps go to the job's stderr)")
    if result.skipped:
        parts.append(f"{len(result.skipped)} skipped: {result.skipped[0]}")
    if result.error:
        parts.append(result.error)
    return f"{node}: " + ("; ".join(parts) or "nothing to dump")


def odd_process(answers: Mapping[str, NodeStacks]) -> tuple[str, int, str] | None:
    """The one dumped process (node, pid) outside every collective while the others wait in one.

    Each (node, pid) dump is fed to the catalogue under a `[rankK]:` prefix of its own, so the
    stack reader (`goodput.diagnose.signatures.stalls`) keeps the processes apart; K maps back to
    the node the agent's token proved and the pid Slurm listed, never to anything the dump says.
    """
    who: list[tuple[str, int]] = []
    lines: list[str] = []
    for node in sorted(answers):
        for pid, text in sorted(answers[node].dumps.items()):
            index = len(who)
            who.append((node, pid))
            for line in text[:MAX_DUMP_CHARS].splitlines():
                if len(lines) >= MAX_ANALYSED_LINES:
                    break
                lines.append(f"[rank{index}]:{line[:1024]}")
    if len(who) < 2:
        return None
    # The stack reader itself, not the verdict: a louder line in some dump (an error with a rank of
    # its own) would lead the verdict and name its rank instead of the process outside the collective.
    catalogue = default_catalogue()
    builder = VerdictBuilder(catalogue.version).add_all(catalogue.scan(lines))
    odd = builder.stalls.odd_stack()
    rank = odd.match.context.rank if odd is not None else None
    if rank is None or not 0 <= rank < len(who):
        return None
    node, pid = who[rank]
    return node, pid, f"{len(who) - 1} other dumped processes wait in a collective; pid {pid} on {node} is elsewhere"


def evidence(request: StackRequest, answers: Mapping[str, NodeStacks], waited_s: float) -> StackEvidence:
    """The incident's evidence from one request: every node named, and the culprit where one stands out."""
    lines = tuple(describe(node, answers.get(node), waited_s) for node in request.nodes)
    odd = odd_process({n: a for n, a in answers.items() if n in request.nodes})
    if odd is None:
        return StackEvidence(lines=lines)
    node, pid, why = odd
    culprit = Culprit(kind=CulpritKind.RANK, id=f"pid {pid} on {node}", confidence=0.6)
    return StackEvidence(lines=lines, culprit=culprit, node=node, explanation=f"stack dumps: {why}")


class StackCaptureInput(Frozen):
    """The recovery workflow's ask: stacks of this incident's job, on the nodes Slurm lists for it."""

    incident_id: str = Field(max_length=512)
    job_id: JobId


class StackCaptureResult(Frozen):
    """What the `capture_stacks` activity hands back; `note` says why nothing was asked."""

    evidence: StackEvidence = Field(default_factory=StackEvidence)
    asked: tuple[str, ...] = ()
    note: str = ""
