"""Slurm commands that act on many jobs or nodes at once, and how to read their answers.

A switch or rack failure fails many jobs at once; one `scontrol requeuehold 1,2,3` costs
slurmctld one command where three cost three (issue #29). The coalescer that groups them lives
in the adapter layer (activities/adapters/slurm_batch.py); this module is what it needs to know
about Slurm, pure:

* which ids may be joined into a list at all: plain job numbers only, each checked again here,
  so no byte a job controls (its name, comment, output) can add an id or an option to the list;
* how scontrol answers a list: it acts on every job it can and prints one line per job it could
  not (`Invalid job id specified for job 999999`, checked on 22.05), so the others succeeded;
* the status of one job as `squeue -j ID` prints it (a poll alone in its tick): only job id,
  state, reason, restart count and node list, fields Slurm writes and no job can, each line in
  exactly that shape or the whole answer is refused (the job is then read alone, the trusted way;
  the polls of one tick go together as goodput.slurm.job_script's one scontrol);
* every job's id, state, restart count, nodes and partition in one `squeue --states=all` (the
  cluster watcher's scan): no field a job writes, so its lines read one way, and the jobs' whole
  records are read only where a scan needs them (goodput.detect.job_scan);
* a partition's nodes as `sinfo -p` prints them: 22.05's `sinfo --json` ignores `-p`, and the
  text form holds only node names and states, which no job can shape;
* the records of several nodes in one `scontrol show node -o a,b,c` (a switch's node incidents and
  their jobs' links read the same nodes within a second): each caller takes only its own line, and
  only when the answer is exactly one `NodeName=` line per node asked, each once;
* one exclusion for several jobs, `scontrol update JobId=1,2 ExcNodeList=a,b`, only for jobs whose
  merged lists are equal (Slurm sets one list for all of them; it answers per job, as a requeue).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from goodput.identifiers import (
    InvalidIdentifierError,
    validate_job_id,
    validate_node_name,
    validate_partition,
    validate_reason,
)
from goodput.scheduler import JobState, JobStatus, NodeInfo
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.records import HELD_REASONS, clean, job_state, node_state

MAX_BATCH = 64  # ids or names in one command: argv stays far below ARG_MAX, a failure stays small
MAX_ERROR_LINES = 1024
_PLAIN_JOB = re.compile(r"[0-9]{1,12}")
# scontrol's per-job error for a list: "<Slurm's message> for job <id>", one line each
_JOB_ERROR = re.compile(r"(?P<message>[^\n]{1,300}) for job (?P<id>[0-9]{1,12})")
# `12|PENDING|BeginTime|1|2026-12-03T18:18:08||`: id, state, reason (Slurm's words:
# `ReqNodeNotAvail, UnavailableNodes:n1`), restart count, when it may start, node list. No `|` can
# be inside a field, so a line reads one way or not at all.
_STATUS = re.compile(r"(?P<id>[0-9]{1,12})\|(?P<state>[A-Z_]{1,32})\|(?P<reason>[A-Za-z0-9_(),:. =/+-]{0,300})"
                     r"\|(?P<restarts>[0-9]{1,9})\|(?P<eligible>[0-9T:-]{19}|N/A|Unknown|None)"
                     r"\|(?P<nodes>[A-Za-z0-9_.,\[\]-]{0,4096})\|")
_NOT_PLAIN = re.compile(r"[0-9]{1,12}[_+][^\n]*")  # an array task or het component row: not a plain job
# squeue words a requeuehold's reason with spaces (`job requeued in held state`), scontrol with `_`
_HELD_REASONS = HELD_REASONS | {"job requeued in held state"}
STATUS_FIELDS = "--Format=JobID:|,State:|,Reason:|,RestartCnt:|,EligibleTime:|,NodeList:|"
MAX_REASON = 512  # characters of a node's reason kept from sinfo's text
_STATE_WORD = re.compile(r"[a-z_*~#!%$@^-]{1,32}(?:\+[a-z_*~#!%$@^-]{1,32}){0,8}")

Argv = list[str]


def batchable_job(job_id: str) -> bool:
    """A plain job number (not an array task `12_3` nor a het component `12+1`): only those are
    joined, so that a list means the same jobs to every Slurm version."""
    return bool(_PLAIN_JOB.fullmatch(job_id))


def job_list(job_ids: Sequence[str]) -> str:
    """`1,2,3` from distinct plain job numbers; anything else is refused, not dropped."""
    if not job_ids or len(job_ids) > MAX_BATCH:
        raise InvalidIdentifierError(f"a job list holds 1 to {MAX_BATCH} ids, not {len(job_ids)}")
    for job_id in job_ids:
        if not batchable_job(validate_job_id(job_id)):
            raise InvalidIdentifierError(f"job id {job_id[:40]!r} cannot be part of a list")
    if len(set(job_ids)) != len(job_ids):
        raise InvalidIdentifierError("a job list names a job twice")
    return ",".join(job_ids)


def requeue_many(job_ids: Sequence[str], *, hold: bool = False) -> Argv:
    return ["scontrol", "requeuehold" if hold else "requeue", job_list(job_ids)]


def release_many(job_ids: Sequence[str]) -> Argv:
    return ["scontrol", "release", job_list(job_ids)]


def drain_many(names: Sequence[str], reason: str) -> Argv:
    """One drain of several nodes with one reason (the caller checked each node first)."""
    return ["scontrol", "update", f"NodeName={node_list(names)}", "State=DRAIN", f"Reason={validate_reason(reason)}"]


def show_nodes_many(names: Sequence[str]) -> Argv:
    """One `-o` record line per node of the list (22.05: a name Slurm does not know fails the whole read)."""
    return ["scontrol", "show", "node", "-o", node_list(names)]


def node_list(names: Sequence[str]) -> str:
    """`a,b,c` from distinct valid node names; anything else is refused."""
    if not names or len(names) > MAX_BATCH or len(set(names)) != len(names):
        raise InvalidIdentifierError(f"a node list holds 1 to {MAX_BATCH} distinct names")
    return ",".join(validate_node_name(n) for n in names)


def node_line(text: str, name: str, asked: Sequence[str]) -> str | None:
    """Node `name`'s line of `show_nodes_many(asked)`'s answer; None when the answer is not exactly
    one `NodeName=<n> ` line for each node asked, each once (a reason an admin wrote with a newline
    could otherwise pose as another node's line): then the node is read alone."""
    lines = [line for line in text.splitlines()[:MAX_BATCH + 1] if line.strip()]
    found: dict[str, str] = {}
    for line in lines:
        head = line.split(" ", 1)[0]
        if not head.startswith("NodeName=") or head[len("NodeName="):] in found:
            return None
        found[head[len("NodeName="):]] = line
    if len(lines) != len(found) or set(found) != set(asked):
        return None
    return found.get(name)


def exclude_many(job_ids: Sequence[str], nodes: Sequence[str]) -> Argv:
    """One `ExcNodeList` for every job of the list (each job's merged list is exactly `nodes`)."""
    return ["scontrol", "update", f"JobId={job_list(job_ids)}", f"ExcNodeList={node_list(nodes)}"]


def job_errors(stderr: str, job_ids: Sequence[str]) -> Mapping[str, str] | None:
    """Per job of the list, Slurm's error for it; None when the output does not say which job
    failed (then nothing can be told about any of them, and each is sent again alone).

    Only ids of the list count: a line naming another id is not ours to believe."""
    wanted = set(job_ids)
    found: dict[str, str] = {}
    lines = [line.strip() for line in stderr.splitlines()[:MAX_ERROR_LINES] if line.strip()]
    for line in lines:
        match = _JOB_ERROR.fullmatch(line)
        if match is None or match.group("id") not in wanted:
            return None
        found[match.group("id")] = match.group("message")
    return found or None


def squeue_status(job_ids: Sequence[str]) -> Argv:
    """One line per job of the list: `id|STATE|reason|restarts|eligible|nodes|` (22.05 and later)."""
    return ["squeue", "--noheader", "-j", job_list(job_ids), STATUS_FIELDS]


def parse_statuses(text: str) -> dict[str, JobStatus] | None:
    """Each plain job's status from `squeue_status`'s answer; None when any line is not exactly
    Slurm's fields, or names a job twice: then no line is believed. Rows of array tasks or het
    components are skipped (the job asked for is then missing, and read alone)."""
    statuses: dict[str, JobStatus] = {}
    for line in text.splitlines()[:MAX_ERROR_LINES + 1]:
        line = line.strip()
        if not line:
            continue
        match = _STATUS.fullmatch(line)
        if match is None:
            if _NOT_PLAIN.fullmatch(line) and "\n" not in line:
                continue
            return None
        job_id = match.group("id")
        if job_id in statuses or match.group("state") not in JobState.__members__:
            return None
        try:
            nodes, eligible = expand_hostlist(match.group("nodes")), local_time(match.group("eligible"))
        except ValueError:  # HostlistError is one; so is a date that is no date
            return None
        statuses[job_id] = JobStatus(job_id=job_id, state=JobState[match.group("state")],
                                     state_reason=clean(match.group("reason")), nodes=nodes,
                                     restart_count=int(match.group("restarts")),
                                     held=match.group("reason") in _HELD_REASONS,
                                     eligible_at=eligible)
    return statuses


def local_time(text: str) -> float | None:
    """squeue's `2026-12-03T18:18:08` (the local time of the host that ran it) as epoch seconds."""
    return datetime.fromisoformat(text).timestamp() if text[:1].isdigit() else None


def sinfo_partition(partition: str) -> Argv:
    """One line per node of `partition` (or a comma-separated list): name and complete state."""
    for name in partition.split(","):
        validate_partition(name)
    return ["sinfo", "--noheader", "--Node", f"--partition={partition}", "--Format=NodeList:|,StateComplete:|"]


def parse_partition_nodes(text: str) -> list[NodeInfo]:
    """`node1|idle+drain|` lines as NodeInfo (no reason: sinfo's text form prints none here).

    A node in two of the partitions is listed twice; it is returned once. A line that is not a
    node name and a state is refused rather than guessed at."""
    return _sinfo_nodes(text, with_reason=False)


def _sinfo_nodes(text: str, *, with_reason: bool) -> list[NodeInfo]:
    """`name|state|` (or `name|state|reason|`) lines, each node once; anything else refused."""
    nodes: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, rest = line.strip().partition("|")
        state, _, tail = rest.partition("|")
        ended = tail.endswith("|") if with_reason else not tail.strip()
        if not ended or not _STATE_WORD.fullmatch(state):
            raise ValueError(f"unexpected sinfo line {line[:80]!r}")
        said = clean(tail[:-1])[:MAX_REASON] if with_reason else ""
        base, flags = node_state(state)
        nodes.setdefault(validate_node_name(name), NodeInfo(name=name, state=base, flags=flags,
                                                            reason="" if said == "none" else said))
    return list(nodes.values())


# The states the cluster watcher compares (NodeInfo.dead): sinfo keeps only nodes in them, so the
# watcher reads a line per troubled node instead of the whole cluster in JSON every scan (26 MB at
# 10,000 nodes in 24.11's form; `python -m benchmarks scan-cost`, #29).
DEAD_NODE_STATES = "down,fail,no_respond"


def sinfo_dead_nodes() -> Argv:
    """One line per node that is DOWN, FAIL(ING) or not responding: name, complete state, reason."""
    return ["sinfo", "--noheader", "--Node", f"--states={DEAD_NODE_STATES}",
            "--Format=NodeList:|,StateComplete:|,Reason:|"]


def parse_dead_nodes(text: str) -> list[NodeInfo]:
    """`node3|down+not_responding|Not responding|` lines as NodeInfo, each node once.

    The reason comes last, so a `|` inside it (an operator's words) stays in it; name and state
    must be what sinfo prints for them, or the line is refused rather than guessed at."""
    return _sinfo_nodes(text, with_reason=True)


# The cluster watcher's scan: `12|RUNNING|0|node[1-2]|gpu|`. The partition comes last and, like
# every field here, is a name an administrator chose; a pending job may list several.
SCAN_FIELDS = "--Format=JobID:|,State:|,RestartCnt:|,NodeList:|,Partition:|"
MAX_SCAN_LINES = 1_000_000  # Slurm's MaxJobCount is 10,000 by default; the largest sites raise it
_SCAN = re.compile(r"(?P<id>[0-9]{1,12})\|(?P<state>[A-Z_]{1,32})\|(?P<restarts>[0-9]{1,9})"
                   r"\|(?P<nodes>[A-Za-z0-9_.,\[\]-]{0,4096})\|(?P<partition>[A-Za-z0-9_.,-]{0,1024})\|")


def squeue_scan(node: str = "", user_id: int | None = None) -> Argv:
    """One line per job slurmctld knows, ended ones included (those on `node`, or of the user
    `user_id`, only, when given)."""
    where = [f"--nodelist={validate_node_name(node)}"] if node else []
    if user_id is not None:
        if isinstance(user_id, bool) or not 0 <= user_id < 2**32:
            raise InvalidIdentifierError(f"not a user id: {user_id!r}")
        where.append(f"--user={user_id}")
    return ["squeue", "--noheader", "--states=all", *where, SCAN_FIELDS]


def parse_scan(text: str) -> list[JobStatus]:
    """`squeue_scan`'s answer, every line exactly Slurm's fields and every job once; ValueError
    otherwise (the whole answer, not the line: the caller then reads the jobs the JSON way)."""
    statuses: dict[str, JobStatus] = {}
    for count, line in enumerate(text.splitlines()):
        if count >= MAX_SCAN_LINES:
            raise ValueError(f"more than {MAX_SCAN_LINES} lines")
        line = line.strip()
        if not line:
            continue
        match = _SCAN.fullmatch(line)
        if match is None or match.group("id") in statuses:
            raise ValueError(f"unexpected squeue line {line[:80]!r}")
        job_id = match.group("id")
        statuses[job_id] = JobStatus(job_id=job_id, state=job_state(match.group("state")),
                                     nodes=expand_hostlist(match.group("nodes")),
                                     restart_count=int(match.group("restarts")),
                                     partition=match.group("partition"))
    return list(statuses.values())
