"""Between pyslurm's job objects and goodput's: a JobInfo from a `pyslurm.Job`, and the
`JobSubmitDescription` attributes of a resubmitted copy.

Kept apart from the backend because the copy's description is where the trust rules of
resubmission meet pyslurm: the copy is submitted for the job's owner (`user_id`/`group_id`) with
exactly the environment `goodput.slurm.submit_as` allows (a dict: pyslurm's default "ALL" would be
goodput's whole environment), in the job's own working directory (pyslurm's default is goodput's),
and never from a batch script that pyslurm would take for the path of a file to read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from goodput.identifiers import validate_partition
from goodput.scheduler import JobInfo, JobState, PermanentSchedulerError
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.records import expedite_hold, job_state
from goodput.slurm.resubmit import output_pattern, tag_comment
from goodput.slurm.submit_as import Account

_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state",
                           "job requeued in held state"})


def field_of(obj: Any, name: str) -> Any:
    return getattr(obj, name, None)


def text_of(value: Any) -> str:
    return "" if value is None else str(value).strip()


def int_of(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def id_of(value: Any) -> int | None:
    """A uid/gid pyslurm reported, or None when it did not (or reported nonsense)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**32 - 1:
        return value
    return None


def hosts_of(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        value = ",".join(map(str, value))
    return expand_hostlist(text_of(value))


def expedite_flag(job: Any) -> bool:
    """The job's expedite flag (`--requeue=expedite`, Slurm 25.11+), as pyslurm reports it: never.

    pyslurm 25.11 (checked up to 25.11.2, PySlurm/pyslurm 367db8b) declares Slurm's
    `EXPEDITED_REQUEUE` job bit, but no `Job` property reads it and the job's `bitflags` are not a
    Python attribute. The hold's other three parts are readable (state `REQUEUE_HOLD`, held, a
    failed run), but without the flag Slurm's expedited hold cannot be told from another hold, so
    this backend never reports one: such a job is held like any other and goodput does not release
    it (docs/slurm.md, "Expedited requeue"). A pyslurm that exposes the bit is read here.
    """
    del job
    return False


def job_info(job: Any) -> JobInfo:
    """A JobInfo from a pyslurm.Job."""
    state_name = text_of(field_of(job, "state")).upper()
    state = job_state(state_name)
    if state is JobState.COMPLETING and not field_of(job, "end_time"):
        state = JobState.REQUEUED  # a requeued job completes its old run with no end time
    reason = text_of(field_of(job, "state_reason"))
    raw_exit = field_of(job, "exit_code")
    exit_code = "" if raw_exit is None else f"{int_of(raw_exit)}:{int_of(field_of(job, 'exit_code_signal'))}"
    held = reason in _HELD_REASONS or (field_of(job, "priority") == 0 and state is JobState.PENDING)
    # The same four-part rule as the CLI, JSON and REST readers; pyslurm's `state` is
    # slurm_job_state_string, which names the REQUEUE_HOLD flag as scontrol does.
    expedited = expedite_hold(requeue_hold=state_name == "REQUEUE_HOLD", expedited=expedite_flag(job), held=held,
                              exit_code=exit_code)
    return JobInfo(
        job_id=str(job.id), name=text_of(field_of(job, "name")), state=state, state_reason=reason,
        partition=text_of(field_of(job, "partition")), nodes=hosts_of(field_of(job, "allocated_nodes")),
        comment=text_of(field_of(job, "comment")), requeue=bool(field_of(job, "is_requeueable")),
        restart_count=int_of(field_of(job, "requeue_count")),
        exit_code=exit_code,
        stdout_path=text_of(field_of(job, "standard_output")), stderr_path=text_of(field_of(job, "standard_error")),
        command=text_of(field_of(job, "command")), work_dir=text_of(field_of(job, "working_directory")),
        excluded_nodes=hosts_of(field_of(job, "excluded_nodes")),
        reservation=text_of(field_of(job, "reservation"))[:1024],
        held=held, expedite_held=expedited,
        user=text_of(field_of(job, "user_name")), user_id=id_of(field_of(job, "user_id")),
        group_id=id_of(field_of(job, "group_id")))


def submit_attributes(job: Any, job_id: str, script: str, *, owner: Account, token: str,
                      exclude: Sequence[str] = (), environment: Mapping[str, str] | None = None,
                      hold: bool = False) -> dict[str, Any]:
    """JobSubmitDescription attributes that recreate `job` (what sbatch options do for the CLI),
    submitted for `owner` with exactly `environment` (a dict: no "ALL" of goodput's).

    A submission through the API skips sbatch's `#SBATCH` parsing, so everything comes from the
    job record, which already holds those options as Slurm applied them.
    """
    group_id = id_of(field_of(job, "group_id"))
    attrs: dict[str, Any] = {"script": script, "comment": tag_comment(text_of(field_of(job, "comment")), job_id, token),
                             "is_requeueable": bool(field_of(job, "is_requeueable")),
                             "user_id": owner.uid, "group_id": owner.gid if group_id is None else group_id,
                             "environment": dict(environment or {}),
                             # pyslurm defaults to goodput's cwd; the job's own is always recorded
                             "working_directory": text_of(field_of(job, "working_directory")) or "/"}
    for name, key in (("name", "name"), ("account", "account"), ("qos", "qos"), ("reservation", "reservations")):
        if text_of(field_of(job, name)):
            attrs[key] = text_of(field_of(job, name))
    attrs.update(_resources(job))
    attrs.update(_outputs_and_nodes(job, exclude))
    if hold:
        attrs["priority"] = 0  # sbatch --hold
    return attrs


def _resources(job: Any) -> dict[str, Any]:
    """The partition, sizes, limits, constraints and GRES the job asked for, as it recorded them."""
    attrs: dict[str, Any] = {}
    partition = text_of(field_of(job, "partition")).split(",")[0]
    if partition:
        attrs["partitions"] = validate_partition(partition)
    for name in ("num_nodes", "cpus_per_task", "time_limit", "memory_per_node", "memory_per_cpu"):
        if int_of(field_of(job, name)) > 0:
            attrs["nodes" if name == "num_nodes" else name] = int_of(field_of(job, name))
    if "time_limit" in attrs:
        attrs["time_limit"] = str(attrs["time_limit"])  # minutes, as a Slurm time string
    if int_of(field_of(job, "ntasks_per_node")) > 0:
        attrs["ntasks_per_node"] = int_of(field_of(job, "ntasks_per_node"))
    elif int_of(field_of(job, "ntasks")) > 0:
        attrs["ntasks"] = int_of(field_of(job, "ntasks"))
    constraints = field_of(job, "constraints")
    if constraints:
        attrs["constraints"] = constraints if isinstance(constraints, str) else ",".join(constraints)
    gres = field_of(job, "gres_per_node")
    if gres:
        attrs["gres_per_node"] = dict(gres) if isinstance(gres, dict) else text_of(gres)
    return attrs


def _outputs_and_nodes(job: Any, exclude: Sequence[str]) -> dict[str, Any]:
    """Its output files (as patterns) and its pinned and excluded nodes, with `exclude` added; a
    pin on a node now excluded is dropped (it could never start)."""
    attrs: dict[str, Any] = {}
    stdout = output_pattern(text_of(field_of(job, "standard_output")), str(job.id))
    stderr = output_pattern(text_of(field_of(job, "standard_error")), str(job.id))
    if stdout:
        attrs["standard_output"] = stdout
    if stderr and stderr != stdout:
        attrs["standard_error"] = stderr
    pinned = hosts_of(field_of(job, "required_nodes"))
    if pinned and not set(pinned) & set(exclude):
        attrs["required_nodes"] = list(pinned)
    excluded = list(dict.fromkeys([*hosts_of(field_of(job, "excluded_nodes")), *exclude]))
    if excluded:
        attrs["excluded_nodes"] = excluded
    return attrs


def refuse_script_that_names_a_file(job_id: str, script: str) -> None:
    """pyslurm reads `script` from a file when the text is the path of one (relative to the
    worker's directory). A job's script is its owner's text: one shaped like a path to a file
    someone planted (`#!/../secret`) would make goodput read that file and submit its contents.
    The script's first path component must not exist; the worker's directory must not be writable
    by others (docs/slurm.md), so it cannot appear between this check and the submit.
    """
    first = script.split("/", 1)[0]
    try:
        planted = os.path.lexists(first)
    except (OSError, ValueError):
        planted = True
    if planted:
        raise PermanentSchedulerError(f"job {job_id}'s batch script starts like a path that exists in the "
                                      "worker's directory; pyslurm would read that file instead, refusing")
