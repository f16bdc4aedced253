"""Parsers for Slurm's JSON (`squeue --json`, `sinfo --json`, `scontrol show --json`, slurmrestd)
in the shapes of Slurm 22.05 and 23.02+.

The JSON changed shape between releases, and a CI machine may run either (Debian 12 ships
22.05, Debian 13 ships 24.11), so the parsers detect the shape from the data, not from a
version number:

* 22.05 (`openapi/v0.0.38`): `job_state` and node `state` are strings, drain is in
  `state_flags`, numbers are plain.
* 23.02+ (`v0.0.39`..`v0.0.42`, same as slurmrestd's): states are lists (`["IDLE", "DRAIN"]`),
  numbers are wrapped as `{"set": true, "infinite": false, "number": 3}`, and 24.11's
  `sinfo --json` lists `sinfo` entries (one per partition and node group) instead of `nodes`.

JSON is the unambiguous source goodput falls back to when a text record could have been forged,
so it must not be a way in either: numbers are limited to 20 digits while decoding, NaN and
infinities are refused, too deep nesting and any value of the wrong type (a list where text is
expected, a job that is not an object) are a SlurmJsonError with a message, never a TypeError,
ValueError or RecursionError, and a job is looked up by its id, never taken because it came first.
The decoding and the typed value readers are goodput.slurm.jsonvalues'; this module says what the
values mean for jobs and nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goodput.identifiers import validate_job_id
from goodput.scheduler import JobInfo, JobState, NodeInfo, UnknownJobError
from goodput.slurm import stdio
from goodput.slurm.jsonvalues import (
    MAX_DOCUMENT,
    MAX_ERRORS,
    MAX_LIST,
    MAX_NUMBER,
    SlurmJsonError,
    decode,
    entries,
    errors_in,
    fail,
    flag,
    hostnames,
    id_number,
    load,
    number,
    slurm_release,
    states,
    text,
)
from goodput.slurm.records import expedite_hold, job_state

# The value readers live in goodput.slurm.jsonvalues; callers import them from here too.
__all__ = ["MAX_DOCUMENT", "MAX_ERRORS", "MAX_LIST", "MAX_NUMBER", "SlurmJsonError", "decode", "entries",
           "errors_in", "find_job", "find_job_object", "flag", "id_number", "job_from_json", "load",
           "node_from_json", "number", "parse_sinfo_json", "parse_squeue_json", "slurm_release", "states", "text"]

_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})


def _exit_code(value: Any) -> str:
    if isinstance(value, Mapping):  # 23.02+: {"status": [...], "return_code": {...}, "signal": {...}}
        code = number(value.get("return_code"))
        signal = value.get("signal")
        sig = number(signal.get("id")) if isinstance(signal, Mapping) else 0
        return f"{code}:{sig}"
    if value is None:
        return ""
    raw = number(value)  # 22.05: the raw wait status
    return f"{raw >> 8}:{raw & 0x7F}"


def _stdio(job: Mapping[str, Any], job_id: int) -> tuple[str, str]:
    names = stdio.JobNames(job_id=job_id, array_job_id=id_number(job.get("array_job_id")) or 0,
                           array_task_id=id_number(job.get("array_task_id")), user=text(job.get("user_name")),
                           name=text(job.get("name")), work_dir=text(job.get("current_working_directory")))
    batch = job.get("batch_flag", True) is not False
    return stdio.output_paths(text(job.get("standard_output")), text(job.get("standard_error")), batch, names)


def _as_submitted(job: Mapping[str, Any], stdout: str, stderr: str) -> bool:
    """Whether the output paths are the submitted patterns, not the files: 22.05 (job_state a
    string) and 26.05 print `out-%j.log` with an empty stderr; 24.11 prints the expanded files."""
    return isinstance(job.get("job_state"), str) or "%" in stdout or "%" in stderr or not (stdout and stderr)


def job_from_json(job: Mapping[str, Any], *, expand_output: bool = False) -> JobInfo:
    """A job object of `squeue --json`, `scontrol show job --json` or slurmrestd.

    `expand_output` turns the output patterns 22.05 and 26.05 print (`out-%j.log`) into the files
    scontrol prints.
    """
    if not isinstance(job, Mapping):
        fail(f"a job entry that is not an object but {type(job).__name__}")
    job_id = id_number(job.get("job_id"))
    if job_id is None:
        fail("a job entry without a valid job_id")
    job_states = states(job.get("job_state"))
    state = job_state(job_states[0]) if job_states else JobState.UNKNOWN
    reason = text(job.get("state_reason"))
    if reason == "None":
        reason = ""
    if isinstance(job.get("hold"), bool):
        held = bool(job["hold"])
    else:
        held = reason in _HELD_REASONS or (number(job.get("priority"), 1) == 0
                                           and state is JobState.PENDING)
    exit_code = _exit_code(job.get("exit_code"))
    flags = job.get("flags")
    expedited = expedite_hold(requeue_hold="REQUEUE_HOLD" in job_states,
                              expedited=isinstance(flags, list) and "EXPEDITED_REQUEUE" in flags,
                              held=held, exit_code=exit_code)
    stdout, stderr = text(job.get("standard_output")), text(job.get("standard_error"))
    if expand_output and _as_submitted(job, stdout, stderr):
        stdout, stderr = _stdio(job, job_id)
    return JobInfo(
        job_id=str(job_id),
        name=text(job.get("name")),
        state=state,
        state_reason=reason,
        partition=text(job.get("partition")),
        nodes=hostnames(job.get("nodes")),
        comment=text(job.get("comment")),
        requeue=flag(job.get("requeue")),
        restart_count=number(job.get("restart_cnt")),
        exit_code=exit_code,
        stdout_path=stdout,
        stderr_path=stderr,
        command=text(job.get("command")),
        work_dir=text(job.get("current_working_directory")),
        excluded_nodes=hostnames(job.get("excluded_nodes")),
        held=held,
        expedite_held=expedited,
        reservation=text(job.get("resv_name"))[:1024],
        dependency=text(job.get("dependency"))[:4096],
        user=text(job.get("user_name")),
        user_id=id_number(job.get("user_id")),
        group_id=id_number(job.get("group_id")),
    )


def _names_job(job: Mapping[str, Any], job_id: str) -> bool:
    """Whether a job object is `123`, array task `123_4` or het component `123+1`."""
    base, _, offset = job_id.partition("+")
    number_part, _, task = base.partition("_")
    if not task and not offset:
        return id_number(job.get("job_id")) == int(number_part)
    if task and not offset:
        found = (id_number(job.get("array_job_id")), id_number(job.get("array_task_id")))
        return found == (int(number_part), int(task))
    if offset and not task:
        found = (id_number(job.get("het_job_id")), id_number(job.get("het_job_offset")))
        return found == (int(number_part), int(offset))
    return False


def find_job_object(document: Mapping[str, Any], job_id: str) -> Mapping[str, Any]:
    """The object of job `job_id` among the `jobs` of a document: exactly one must match."""
    validate_job_id(job_id)
    matches = [job for job in entries(document, "jobs") if _names_job(job, job_id)]
    if not matches:
        raise UnknownJobError(f"unknown job {job_id}")
    if len(matches) > 1:
        fail(f"{len(matches)} entries claim to be job {job_id}")
    return matches[0]


def find_job(document: Mapping[str, Any], job_id: str, *, expand_output: bool = False) -> JobInfo:
    """Job `job_id` among the `jobs` of a document: exactly one must match."""
    return job_from_json(find_job_object(document, job_id), expand_output=expand_output)


def parse_squeue_json(raw: str) -> list[JobInfo]:
    """All jobs in `squeue --json` (22.05 ignores -j/-t/-u there: filter the result)."""
    return [job_from_json(job) for job in entries(load(raw), "jobs")]


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
    if not isinstance(node, Mapping):
        fail(f"a node entry that is not an object but {type(node).__name__}")
    return _node_from(text(node.get("name")), node.get("state"), node.get("state_flags"),
                      node.get("reason"), node.get("reason_set_by_user"), node.get("gres"))


def _group_nodes(group: Mapping[str, Any], found: dict[str, NodeInfo]) -> None:
    node_block = group.get("node") or {}
    names_block = group.get("nodes") or {}
    if not isinstance(node_block, Mapping) or not isinstance(names_block, Mapping):
        fail("an sinfo group whose 'node' or 'nodes' is not an object")
    names = names_block.get("nodes") or []
    if not isinstance(names, list):
        fail("an sinfo group whose node names are not a list")
    for entry in names:
        if not isinstance(entry, str):
            fail("an sinfo group with a node name that is not text")
        for name in hostnames(entry):
            found.setdefault(name, _node_from(name, node_block.get("state"), None, group.get("reason"),
                                              group.get("reason_set_by_user"), group.get("gres")))


def parse_sinfo_json(raw: str) -> list[NodeInfo]:
    """Nodes of `sinfo --json`: a `nodes` list (22.05) or `sinfo` groups (23.02+), one per node."""
    document = load(raw)
    found: dict[str, NodeInfo] = {}
    if "nodes" in document:
        for node in entries(document, "nodes"):
            info = node_from_json(node)
            found.setdefault(info.name, info)
    elif "sinfo" in document:
        for group in entries(document, "sinfo"):
            _group_nodes(group, found)
    else:
        fail("sinfo JSON with neither 'nodes' nor 'sinfo'")
    return list(found.values())
