"""Parsers for `squeue --json` and `sinfo --json` in the shapes of Slurm 22.05 and 23.02+.

The JSON changed shape between releases, and a CI machine may run either (Debian 12 ships
22.05, Debian 13 ships 24.11), so the parsers detect the shape from the data, not from a
version number:

* 22.05 (`openapi/v0.0.38`): `job_state` and node `state` are strings, drain is in
  `state_flags`, numbers are plain.
* 23.02+ (`v0.0.39`..`v0.0.42`, same as slurmrestd's): states are lists (`["IDLE", "DRAIN"]`),
  numbers are wrapped as `{"set": true, "infinite": false, "number": 3}`, and 24.11's
  `sinfo --json` lists `sinfo` entries (one per partition and node group) instead of `nodes`.

slurmrestd answers with the same objects, so the REST backend reuses these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from goodput.scheduler import (
    JobInfo,
    JobState,
    NodeInfo,
    SchedulerError,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.errors import classify
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.records import clean, job_state

_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})


class SlurmJsonError(SchedulerError):
    """Output that is not the JSON a Slurm command prints."""


def load(text: str) -> dict[str, Any]:
    """The document, or an error if Slurm reported one inside it.

    With slurmctld down, 22.05's `squeue --json` exits 0 and prints `"jobs": []` next to
    `"errors": [{"error": "Unspecified error", ...}]`: read naively, every job has vanished.
    Any reported error therefore fails the listing, as a retryable error unless it names a
    permanent cause.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmJsonError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise SlurmJsonError("expected a JSON object")
    problems = errors_in(document)
    if problems:
        error = classify(["slurm", "--json"], 1, "", "; ".join(problems))
        if isinstance(error, UnknownJobError | UnknownNodeError):
            raise error
        raise TransientSchedulerError(f"Slurm reported: {'; '.join(problems)[:500]}")
    return document


def errors_in(document: Mapping[str, Any]) -> list[str]:
    """The `errors` entries of a Slurm JSON document as text (22.05 and 23.02+ shapes)."""
    found: list[str] = []
    for entry in document.get("errors") or []:
        if isinstance(entry, Mapping):
            parts = [str(entry.get(k)) for k in ("source", "description", "error") if entry.get(k)]
            found.append(": ".join(parts) or json.dumps(entry))
        elif entry:
            found.append(str(entry))
    return found


def slurm_release(document: Mapping[str, Any]) -> str:
    """`22.05.8` from `meta.Slurm.release` (22.05) or `meta.slurm.release` (23.02+); '' if absent."""
    meta = document.get("meta") or {}
    for key in ("Slurm", "slurm"):
        block = meta.get(key)
        if isinstance(block, Mapping):
            release = block.get("release")
            if isinstance(release, str) and release:
                return release
            version = block.get("version")
            if isinstance(version, Mapping) and "major" in version:
                return f"{version.get('major')}.{int(version.get('minor', 0)):02d}.{version.get('micro', 0)}"
    return ""


def number(value: Any, default: int = 0) -> int:
    """Plain ints (22.05) and `{"set", "infinite", "number"}` wrappers (23.02+)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return default
        value = value.get("number", default)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value)
    return str(value)


def states(value: Any) -> list[str]:
    """`"idle"` or `["IDLE", "DRAIN"]` -> ['IDLE', 'DRAIN']."""
    if isinstance(value, str):
        return [value.upper()] if value else []
    if isinstance(value, Sequence):
        return [str(v).upper() for v in value if v]
    return []


def _exit_code(value: Any) -> str:
    if isinstance(value, Mapping):  # 23.02+: {"status": [...], "return_code": {...}, "signal": {...}}
        code = number(value.get("return_code"))
        signal = value.get("signal") or {}
        sig = number(signal.get("id")) if isinstance(signal, Mapping) else 0
        return f"{code}:{sig}"
    if value is None:
        return ""
    raw = number(value)  # 22.05: the raw wait status
    return f"{raw >> 8}:{raw & 0x7F}"


def job_from_json(job: Mapping[str, Any]) -> JobInfo:
    job_states = states(job.get("job_state"))
    state = job_state(job_states[0]) if job_states else JobState.UNKNOWN
    reason = text(job.get("state_reason"))
    if reason == "None":
        reason = ""
    if "hold" in job and isinstance(job["hold"], bool):
        held = job["hold"]
    else:
        held = reason in _HELD_REASONS or (number(job.get("priority"), 1) == 0
                                           and state is JobState.PENDING)
    return JobInfo(
        job_id=str(number(job.get("job_id"))),
        name=text(job.get("name")),
        state=state,
        state_reason=reason,
        partition=text(job.get("partition")),
        nodes=expand_hostlist(text(job.get("nodes"))),
        comment=text(job.get("comment")),
        requeue=bool(job.get("requeue", False)),
        restart_count=number(job.get("restart_cnt")),
        exit_code=_exit_code(job.get("exit_code")),
        stdout_path=text(job.get("standard_output")),
        stderr_path=text(job.get("standard_error")),
        command=text(job.get("command")),
        work_dir=text(job.get("current_working_directory")),
        excluded_nodes=expand_hostlist(text(job.get("excluded_nodes"))),
        held=held,
    )


def parse_squeue_json(raw: str) -> list[JobInfo]:
    """All jobs in `squeue --json` (22.05 ignores -j/-t/-u there: filter the result)."""
    document = load(raw)
    jobs = document.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmJsonError("squeue JSON without a 'jobs' list")
    return [job_from_json(job) for job in jobs if isinstance(job, Mapping)]


def _node_from(name: str, state_value: Any, extra_flags: Any, reason: Any, user: Any,
               gres: Any) -> NodeInfo:
    all_states = states(state_value) + states(extra_flags)
    base = all_states[0] if all_states else "UNKNOWN"
    flags = tuple(dict.fromkeys(s for s in all_states[1:] if s != base))
    if isinstance(reason, Mapping):  # defensive: some releases nest it
        user = user or reason.get("set_by_user") or reason.get("user")
        reason = reason.get("description")
    if isinstance(gres, Mapping):  # 24.11 sinfo: {"total": ..., "used": ...}
        gres = gres.get("total")
    return NodeInfo(name=name, state=base, flags=flags, reason=text(reason), reason_user=text(user),
                    gres=text(gres))


def node_from_json(node: Mapping[str, Any]) -> NodeInfo:
    """A node object of `sinfo --json` 22.05, `scontrol show nodes --json`, or slurmrestd."""
    return _node_from(text(node.get("name")), node.get("state"), node.get("state_flags"),
                      node.get("reason"), node.get("reason_set_by_user"), node.get("gres"))


def parse_sinfo_json(raw: str) -> list[NodeInfo]:
    """Nodes of `sinfo --json`: a `nodes` list (22.05) or `sinfo` groups (23.02+), one per node."""
    document = load(raw)
    found: dict[str, NodeInfo] = {}
    if isinstance(document.get("nodes"), list):
        for node in document["nodes"]:
            if isinstance(node, Mapping):
                info = node_from_json(node)
                found.setdefault(info.name, info)
    elif isinstance(document.get("sinfo"), list):
        for group in document["sinfo"]:
            if not isinstance(group, Mapping):
                continue
            node_block = group.get("node") or {}
            names_block = group.get("nodes") or {}
            names = names_block.get("nodes") if isinstance(names_block, Mapping) else None
            for entry in names or []:
                for name in expand_hostlist(str(entry)):
                    found.setdefault(name, _node_from(
                        name, node_block.get("state") if isinstance(node_block, Mapping) else None,
                        None, group.get("reason"), group.get("reason_set_by_user"), group.get("gres")))
    else:
        raise SlurmJsonError("sinfo JSON with neither 'nodes' nor 'sinfo'")
    return list(found.values())
