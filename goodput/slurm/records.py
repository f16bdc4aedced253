"""Parsers for `scontrol show job -o` and `scontrol show node -o` (one record per line).

The key=value form is the one machine-readable output every Slurm version has (22.05's scontrol
has no --json) and its keys have been stable for a decade, so single-object lookups use it on
every version. Values may contain spaces (`OS=Linux 6.1 #1 SMP`, comments, drain reasons), so a
record is split only before a token that looks like a Slurm key: a capitalised word, possibly
with `/` or `:` (`CPUs/Task=`, `AllocNode:Sid=`), followed by `=`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from goodput.scheduler import JobInfo, JobState, NodeInfo
from goodput.slurm.hostlist import expand_hostlist

# A key starts a token: start of line or whitespace, then Capitalised[word/:]*=
_KEY = re.compile(r"(?:^|\s+)([A-Z][A-Za-z0-9_]*(?:[/:][A-Za-z0-9_]+)*)=")
# `Reason=xid 79 GPU=3 [root@2026-11-29T09:22:58]`: the setter and time close a node's reason,
# so the reason is cut there rather than at a key-like word inside it.
_REASON = re.compile(r"(?:^|\s)Reason=(?P<text>.*?) \[(?P<user>[^@\]\s]+)@(?P<when>[^\]\s]+)\](?=\s|$)")

NULLS = frozenset({"(null)", "N/A", "None", "n/a", "n/s", "(None)"})

# Job states that are not in goodput's JobState vocabulary map to the closest one.
_JOB_STATE_ALIASES = {
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUE_CRON": JobState.REQUEUED,
    "STOPPED": JobState.SUSPENDED,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING,
    "CONFIGURING": JobState.RUNNING,
    "POWER_UP_NODE": JobState.RUNNING,
    "UPDATE_DB": JobState.RUNNING,
}

_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})

# Base node states Slurm prints before any `+FLAG`; `*` after a state means "not responding".
_NODE_FLAG_SUFFIXES = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                       "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT"}


def split_record(line: str) -> dict[str, str]:
    """One `scontrol show -o` line -> {key: raw value}; later duplicates win."""
    line = line.rstrip("\n")
    matches = list(_KEY.finditer(line))
    record: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        record[match.group(1)] = line[match.end():end].strip()
    reason = _REASON.search(line)
    if reason:
        record["Reason"] = reason.group("text").strip()
        record["ReasonUser"] = reason.group("user")
        record["ReasonTime"] = reason.group("when")
    return record


def split_records(text: str) -> list[dict[str, str]]:
    """Several records, one per non-empty line (scontrol -o without an id lists all)."""
    return [split_record(line) for line in text.splitlines()
            if line.strip() and _KEY.match(line.strip())]


def clean(value: str | None) -> str:
    """Slurm's spellings of "nothing" as ''."""
    if value is None:
        return ""
    value = value.strip()
    return "" if value in NULLS else value


def to_int(value: str | None, default: int = 0) -> int:
    try:
        return int(clean(value))
    except ValueError:
        return default


def job_state(raw: str) -> JobState:
    """`RUNNING`, `PENDING`, `REQUEUE_HOLD`, `CANCELLED by 0` -> JobState (UNKNOWN if new)."""
    token = (raw or "").strip().split(" ")[0].split("+")[0].upper()
    if token in JobState.__members__:
        return JobState[token]
    return _JOB_STATE_ALIASES.get(token, JobState.UNKNOWN)


def node_state(raw: str) -> tuple[str, tuple[str, ...]]:
    """`IDLE+DRAIN`, `DOWN*+DRAIN`, `MIXED` -> ('IDLE', ('DRAIN',)), ('DOWN', ('NOT_RESPONDING', 'DRAIN'))."""
    parts = [p for p in (raw or "").strip().upper().split("+") if p]
    if not parts:
        return "UNKNOWN", ()
    flags: list[str] = []
    base = parts[0]
    while base and base[-1] in _NODE_FLAG_SUFFIXES:
        flags.append(_NODE_FLAG_SUFFIXES[base[-1]])
        base = base[:-1]
    if base in {"DRAINED", "DRAINING"}:  # sinfo's long names for IDLE+DRAIN / ALLOC+DRAIN
        base, flags = ("IDLE" if base == "DRAINED" else "ALLOCATED"), [*flags, "DRAIN"]
    flags.extend(parts[1:])
    return base or "UNKNOWN", tuple(dict.fromkeys(flags))


def job_from_record(record: Mapping[str, str]) -> JobInfo:
    """A JobInfo from `scontrol show job -o` key=values."""
    reason = clean(record.get("Reason"))
    priority = clean(record.get("Priority"))
    state = job_state(record.get("JobState", ""))
    if state is JobState.COMPLETING and clean(record.get("EndTime")) in ("", "Unknown"):
        # a requeued job completes its old run with EndTime reset; a finishing one has an end
        state = JobState.REQUEUED
    held = reason in _HELD_REASONS or (priority == "0" and state is JobState.PENDING)
    return JobInfo(
        job_id=clean(record.get("JobId")),
        name=clean(record.get("JobName")),
        state=state,
        state_reason=reason,
        partition=clean(record.get("Partition")),
        nodes=expand_hostlist(clean(record.get("NodeList"))),
        comment=clean(record.get("Comment")),
        requeue=clean(record.get("Requeue")) == "1",
        restart_count=to_int(record.get("Restarts")),
        exit_code=clean(record.get("ExitCode")),
        stdout_path=clean(record.get("StdOut")),
        stderr_path=clean(record.get("StdErr")),
        command=clean(record.get("Command")),
        work_dir=clean(record.get("WorkDir")),
        excluded_nodes=expand_hostlist(clean(record.get("ExcNodeList"))),
        held=held,
    )


def node_from_record(record: Mapping[str, str]) -> NodeInfo:
    """A NodeInfo from `scontrol show node -o` key=values."""
    state, flags = node_state(record.get("State", ""))
    return NodeInfo(
        name=clean(record.get("NodeName")),
        state=state,
        flags=flags,
        reason=clean(record.get("Reason")),
        reason_user=clean(record.get("ReasonUser")),
        gres=clean(record.get("Gres")),
    )
