"""A job's JSON object in the key=value shape resubmission reads (`resubmit.options_from_record`).

Resubmission rebuilds a job's sbatch options from its record. The `scontrol show job -o` text is
the record on 22.05, but a job whose comment or name holds key-like text (`Project=x`) makes that
text ambiguous (goodput.slurm.unambiguous refuses it), and on 23.02+ goodput reads JSON anyway.
Both cases take the job's JSON object instead (`squeue --json` on 22.05, `scontrol --json show
job` later) and write it as the keys the text would have had, so one option builder serves both
sources. JSON cannot be forged by a field's content, so nothing here has to guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goodput.slurm.jsonvalues import flag, id_number, number, states, text

# Slurm's NO_VAL / INFINITE for 32-bit fields in 22.05's plain numbers: no limit set.
_UNSET_32 = 0xFFFFFFFE


def _minutes(value: Any) -> str:
    """A time limit in minutes as sbatch's `D-HH:MM:SS`; '' when unset or infinite."""
    minutes = number(value, default=-1)
    if minutes < 0 or minutes >= _UNSET_32:
        return ""
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"


def _megabytes(value: Any) -> str:
    amount = number(value, default=0)
    return f"{amount}M" if 0 < amount < _UNSET_32 else ""


def _count(value: Any) -> str:
    count = number(value, default=0)
    return str(count) if 0 < count < _UNSET_32 else ""


def _node_range(count: Any, maximum: Any) -> str:
    """`node_count` with `max_nodes` as scontrol's NumNodes: `2`, or `2-4` for a range."""
    low, high = _count(count), _count(maximum)
    return f"{low}-{high}" if low and high and int(high) > int(low) else low


def _owner(name: Any, uid: Any) -> str:
    found = id_number(uid)
    return f"{text(name)}({found})" if found is not None else ""


def record_from_json(job: Mapping[str, Any]) -> dict[str, str]:
    """The `scontrol show job -o` keys of a JSON job object (22.05 and 23.02+ shapes).

    Only the keys resubmission and its owner checks read; an absent or unset field is left out,
    as scontrol leaves it at `(null)`. Raises SlurmJsonError for a field of the wrong type.
    """
    job_states = states(job.get("job_state"))
    per_node = _count(job.get("tasks_per_node"))
    record = {
        "JobId": str(number(job.get("job_id"))),
        "JobName": text(job.get("name")),
        "UserId": _owner(job.get("user_name"), job.get("user_id")),
        "GroupId": _owner(job.get("group_name"), job.get("group_id")),
        "JobState": job_states[0] if job_states else "",
        "Requeue": "1" if flag(job.get("requeue")) else "0",
        "Restarts": str(number(job.get("restart_cnt"))),
        "BatchFlag": "1" if flag(job.get("batch_flag", True)) else "0",
        "Partition": text(job.get("partition")),
        "ReqNodeList": text(job.get("required_nodes")),
        "ExcNodeList": text(job.get("excluded_nodes")),
        "NodeList": text(job.get("nodes")),
        "NumNodes": _node_range(job.get("node_count"), job.get("max_nodes")),
        "NumTasks": _count(job.get("tasks")),
        "CPUs/Task": _count(job.get("cpus_per_task")) or "1",  # scontrol prints the default, 1
        "TRES": text(job.get("tres_req_str")),
        "NtasksPerN:B:S:C": f"{per_node}:0:*:*" if per_node else "",
        "Account": text(job.get("account")),
        "QOS": text(job.get("qos")),
        "Features": text(job.get("features")),
        "Reservation": text(job.get("resv_name")),
        "TimeLimit": _minutes(job.get("time_limit")),
        "MinMemoryNode": _megabytes(job.get("memory_per_node")),
        "MinMemoryCPU": _megabytes(job.get("memory_per_cpu")),
        "TresPerNode": text(job.get("tres_per_node")),
        "WorkDir": text(job.get("current_working_directory")),
        "StdOut": text(job.get("standard_output")),
        "StdErr": text(job.get("standard_error")),
        "Comment": text(job.get("comment")),
    }
    return {key: value for key, value in record.items() if value}
