"""Whether a `scontrol show job/node -o` record can be trusted, and that it is the one asked for.

Why: the text prints user-chosen values raw, so `--comment="goodput:opt-in JobId=999"` made
`get_job(8)` return job 999, and `UserId=root(0)`, `NodeList=victim`, `Partition=gpu`,
`StdOut=/etc/shadow` could be forged the same way; goodput would then act on someone else's job,
resubmit as root, or tail root's files. In general the format is ambiguous: a free-text value
followed by a key Slurm prints only sometimes could be that key, or text inside the value. So a
record is trusted only when it can be read one way, and any doubt is an error
(SlurmRecordError / AmbiguousRecordError) on which the CLI backend reads the job from JSON
(`squeue --json` on 22.05; 23.02+ is read from `scontrol --json` in the first place), never
a guess.

A job record (`job_record`) is trusted when:

1. the output is exactly one line (a newline in a comment starts a forged "record"; arrays and
   het jobs asked for by their base id print several records and go to JSON too);
2. every key is one Slurm prints (`JOB_KEY_ORDER`, 22.05 to 24.11), appears once, and in
   Slurm's order: a key hidden in a value lands after that value's key, out of order, or twice;
3. the keys Slurm always prints are all there (`REQUIRED_JOB_KEYS`), so each of JobId, UserId,
   GroupId, JobState, Partition, NodeList, ReqNodeList, ExcNodeList, Requeue, Restarts,
   BatchFlag, WorkDir... is Slurm's own: a forged copy would be a second one;
4. structured values have their strict shapes (`_FORMATS`; no spaces in any value that is not
   free text), numbers have bounded digits, and hostlists stay within the hostlist limits;
5. StdErr/StdIn/StdOut are there exactly when BatchFlag=1 (they are printed only for batch
   jobs, so on another job they could only be forged). StdOut is the last free text before keys
   Slurm prints only sometimes: unless it is followed by `Power` (22.05) or ends the record, it
   is left out of the returned record (`--output="/etc/shadow MailUser=x"` is not read as
   /etc/shadow); `get_job` then reads the job from JSON, a resubmission uses the submitted
   pattern;
6. the JobId (or ArrayJobId_ArrayTaskId, HetJobId+HetJobOffset, printed before the first free
   text) is the job asked for.

What stays ambiguous without being refused: a free-text value that precedes optional keys (the
WorkDir before an optional Comment, a Comment before an optional Extra) can be shortened by the
owner's own text. Neither a comment nor a name can reach any field in rule 3, and goodput uses
those values only for the owner's own job (its opt-in marker and checkpoint config, read with the
owner's permissions; a resubmission run as the owner).

Node records (`node_record`) hold no user text, but are read as strictly: one line, known keys
once each, NodeName and State present and well-formed, and the node is the one asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from goodput.identifiers import validate_job_id
from goodput.slurm.errors import AmbiguousRecordError, SlurmRecordError
from goodput.slurm.records import clean, hostnames, record_pairs

# Slurm's print order of every key of `scontrol show job -o` (22.05 through 24.11, merged; and
# 26.05's Exclusive and SubmitLine, the latter the submitting command line, free text, seen on its lab).
JOB_KEY_ORDER = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset", "JobName",
    "HetJobIdSet", "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account", "QOS", "WCKey",
    "JobState", "Reason", "FailedNode", "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot",
    "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime",
    "AccrueTime", "ResizeTime", "StartTime", "EndTime", "Deadline", "CronJob", "CrontabSpec",
    "PreemptEligibleTime", "PreemptTime", "SuspendTime", "SecsPreSuspend", "LastSchedEval", "Scheduler",
    "Partition", "AllocNode:Sid", "ReqNodeList", "ExcNodeList", "NodeList", "SchedNodeList",
    "BatchFeatures", "BatchHost", "StepMgrEnabled", "FedOrigin", "FedViableSiblings", "FedActiveSiblings",
    "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES", "ReqTRES", "AllocTRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "ThreadSpec", "MinCPUsNode", "MinMemoryNode",
    "MinMemoryCPU", "MinMemoryTRES", "MinTmpDiskNode", "Features", "DelayBoot", "ClusterFeatures",
    "Prefer", "Reservation", "OverSubscribe", "Exclusive", "Contiguous", "Licenses", "LicensesAlloc", "Network",
    "Command", "SubmitLine", "WorkDir", "AdminComment", "SystemComment", "Comment", "Extra", "StdErr", "StdIn",
    "StdOut", "Switches", "BurstBuffer", "BurstBufferState", "CPU_min_freq", "CPU_max_freq", "Governor",
    "CpuFreqMin", "CpuFreqMax", "CpuFreqGov", "Power", "GresAllowTaskSharing", "GresEnforceBind",
    "GresOneTaskPerSharing", "KillOInInvalidDependent", "SpreadJob", "OOMKillStep", "CpusPerTres",
    "MemPerTres", "TresBind", "TresFreq", "TresPerJob", "TresPerNode", "TresPerSocket", "TresPerTask",
    "MailUser", "MailType", "NtasksPerTRES", "Container", "ContainerID", "SELinuxContext", "ResvPorts",
)
_JOB_POSITION = {key: index for index, key in enumerate(JOB_KEY_ORDER)}

REQUIRED_JOB_KEYS = frozenset({
    "JobId", "JobName", "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account", "QOS",
    "JobState", "Reason", "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot", "ExitCode",
    "RunTime", "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime", "StartTime",
    "EndTime", "Deadline", "SuspendTime", "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition",
    "AllocNode:Sid", "ReqNodeList", "ExcNodeList", "NodeList", "NumNodes", "NumCPUs", "NumTasks",
    "CPUs/Task", "ReqB:S:C:T", "Socks/Node", "NtasksPerN:B:S:C", "MinCPUsNode", "MinTmpDiskNode",
    "Features", "DelayBoot", "OverSubscribe", "Contiguous", "Licenses", "Network", "Command", "WorkDir",
})

# Values that may hold spaces; every other value is one token.
FREE_TEXT_JOB_KEYS = frozenset({
    "JobName", "Account", "WCKey", "Dependency", "CrontabSpec", "Features", "ClusterFeatures", "Prefer",
    "Network", "Command", "SubmitLine", "WorkDir", "AdminComment", "SystemComment", "Comment", "Extra", "StdErr",
    "StdIn", "StdOut", "BurstBuffer", "BurstBufferState", "MailUser", "Container", "ContainerID",
    "SELinuxContext", "MCS_label", "Licenses", "LicensesAlloc",
})
_BATCH_ONLY = ("StdErr", "StdIn", "StdOut")
MAX_VALUE = 64 * 1024
MAX_PATH = 4096

_ID = r"[0-9]{1,10}"
_PATH = rf"/[^\x00]{{0,{MAX_PATH - 1}}}|\(null\)"
_HOSTLIST = r"[A-Za-z0-9_.\-\[\],]*|\(null\)"
_OWNER = r"(?:[^()\s]{1,64}|\(null\))\([0-9]{1,10}\)"  # user(uid); `(null)` when Slurm cannot name it
_TRES_ITEM = r"[A-Za-z0-9/:._\-]{1,64}=[0-9.]{1,20}[KMGTP]?"  # cpu=2, mem=8000M, gres/gpu=2
_TRES = rf"(?:{_TRES_ITEM}(?:,{_TRES_ITEM})*)?|\(null\)"
# Each applied with fullmatch to a value already bounded by MAX_VALUE; none can backtrack badly.
_FORMATS: dict[str, re.Pattern[str]] = {key: re.compile(pattern) for key, pattern in {
    "JobId": _ID, "ArrayJobId": _ID, "ArrayTaskThrottle": _ID, "HetJobId": _ID, "HetJobOffset": _ID,
    "ArrayTaskId": r"[0-9,%:\-]{1,4096}", "HetJobIdSet": r"[0-9,\-]{1,4096}",
    "UserId": _OWNER, "GroupId": _OWNER,
    "JobState": r"[A-Z_]{1,32}", "Priority": _ID, "Nice": r"-?[0-9]{1,10}",
    "Requeue": r"[01]", "BatchFlag": r"[01]", "Reboot": r"[01]", "Restarts": _ID,
    "ExitCode": r"[0-9]{1,3}:[0-9]{1,3}", "DerivedExitCode": r"[0-9]{1,3}:[0-9]{1,3}",
    "Partition": r"[A-Za-z0-9_.\-]{1,128}(?:,[A-Za-z0-9_.\-]{1,128})*|\(null\)",
    "ReqNodeList": _HOSTLIST, "ExcNodeList": _HOSTLIST, "NodeList": _HOSTLIST, "SchedNodeList": _HOSTLIST,
    "BatchHost": _HOSTLIST, "NumNodes": r"[0-9,\-]{1,64}", "NumCPUs": r"[0-9\-]{1,32}",
    "NumTasks": r"[0-9]{1,10}|N/A", "CPUs/Task": r"[0-9]{1,5}|N/A",
    "TRES": _TRES, "ReqTRES": _TRES, "AllocTRES": _TRES, "TresPerNode": r"[A-Za-z0-9/=,:._\-]*",
    "NtasksPerN:B:S:C": r"(?:[0-9]{1,5}|\*)(?::(?:[0-9]{1,5}|\*)){3}",
    "TimeLimit": r"[0-9:\-]{1,32}|UNLIMITED|Partition_Limit|NONE",
    "MinMemoryNode": r"[0-9.]{1,20}[KMGTP]?", "MinMemoryCPU": r"[0-9.]{1,20}[KMGTP]?",
    # 26.05 prints `StdErr=` (empty) for a job whose errors go with its output (seen on its lab)
    "StdErr": rf"(?:{_PATH})?", "StdIn": _PATH, "StdOut": _PATH, "WorkDir": _PATH,
}.items()}

# `scontrol show node -o` keys (22.05 through 24.11); nodes are read without an order check.
NODE_KEYS = frozenset({
    "NodeName", "Arch", "CoresPerSocket", "CPUAlloc", "CPUEfctv", "CPUErr", "CPUTot", "CPULoad",
    "AvailableFeatures", "ActiveFeatures", "Features", "Gres", "GresDrain", "GresUsed", "NodeAddr",
    "NodeHostName", "BcastAddr", "Port", "Version", "OS", "RealMemory", "AllocMem", "FreeMem", "Sockets",
    "Boards", "CoreSpecCount", "CPUSpecList", "MemSpecLimit", "RestrictedCoresPerGPU", "State",
    "ThreadsPerCore", "TmpDisk", "Weight", "Owner", "MCS_label", "NextState", "Partitions", "BootTime",
    "SlurmdStartTime", "LastBusyTime", "ResumeAfterTime", "CfgTRES", "AllocTRES", "CapWatts",
    "CurrentWatts", "AveWatts", "LowestJoules", "ConsumedJoules", "ExtSensorsJoules", "ExtSensorsWatts",
    "ExtSensorsTemp", "Reason", "ReasonUser", "ReasonTime", "Comment", "Extra", "InstanceId",
    "InstanceType", "ReservationName", "Topology", "TopologyParam",
})
_NODE_FORMATS = {
    "NodeName": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}"),
    "State": re.compile(r"[A-Z_]{1,32}[*~#%!$@^\-]{0,8}(?:\+[A-Z_]{1,32}){0,16}"),
}


def _one_line(text: str, what: str) -> str:
    lines = [line for line in text.split("\n") if line.strip(" ")]
    if not lines:
        raise SlurmRecordError(f"scontrol printed no record for {what}")
    if len(lines) > 1:
        raise AmbiguousRecordError(f"scontrol printed {len(lines)} lines for {what}; several records "
                                   "or a value with a newline, which the text cannot tell apart")
    return lines[0]


def _check_value(key: str, value: str, formats: Mapping[str, re.Pattern[str]], free: frozenset[str]) -> None:
    if len(value) > MAX_VALUE:
        raise SlurmRecordError(f"{key} value of {len(value)} characters (limit {MAX_VALUE})")
    pattern = formats.get(key)
    if pattern is not None and not pattern.fullmatch(value):
        raise AmbiguousRecordError(f"{key}={value[:60]!r} is not what Slurm prints for {key}")
    if key not in free and " " in value:
        raise AmbiguousRecordError(f"{key}={value[:60]!r} has text after its value; it may hide a key")


def _check_job_pairs(pairs: list[tuple[str, str]]) -> None:
    last, previous = -1, ""
    for key, value in pairs:
        position = _JOB_POSITION.get(key)
        if position is None:
            raise AmbiguousRecordError(f"{key!r} is not a key Slurm prints for a job; a value may hide it")
        if position <= last:
            raise AmbiguousRecordError(f"{key} after {previous} is out of Slurm's order; a value may hide it")
        last, previous = position, key
        _check_value(key, value, _FORMATS, FREE_TEXT_JOB_KEYS)
    keys = [key for key, _ in pairs]
    missing = sorted(REQUIRED_JOB_KEYS.difference(keys))
    if missing:
        raise SlurmRecordError(f"job record without {', '.join(missing[:5])}")
    record = dict(pairs)
    batch = [k for k in _BATCH_ONLY if k in record]
    if record["BatchFlag"] == "1" and len(batch) != len(_BATCH_ONLY):
        raise SlurmRecordError("a batch job record without StdErr/StdIn/StdOut")
    if record["BatchFlag"] == "0" and batch:
        raise AmbiguousRecordError(f"{batch[0]} on a job that is not a batch job; only a value can print it")


def _output_path_is_whole(keys: list[str]) -> bool:
    """StdOut is followed by a key Slurm always prints (22.05's Power) or ends the record."""
    after = keys.index("StdOut") + 1
    return after >= len(keys) or keys[after] == "Power"


def _id_parts(job_id: str) -> tuple[int, int | None, int | None]:
    """`123` / `123_4` / `123+1` -> (123, 4 or None, 1 or None) for a validated (short) job id."""
    base, _, offset = job_id.partition("+")
    job, _, task = base.partition("_")
    return int(job), (int(task) if task else None), (int(offset) if offset else None)


def names_job(record: Mapping[str, str], job_id: str) -> bool:
    """Whether a checked record is job `job_id` (an array task or het component by its full id)."""
    job, task, offset = _id_parts(validate_job_id(job_id))
    if task is None and offset is None:
        return clean(record.get("JobId")) == str(job)
    if task is not None and offset is None:
        return (clean(record.get("ArrayJobId")), clean(record.get("ArrayTaskId"))) == (str(job), str(task))
    if task is None:
        return (clean(record.get("HetJobId")), clean(record.get("HetJobOffset"))) == (str(job), str(offset))
    return False


def job_record(text: str, job_id: str) -> dict[str, str]:
    """The record of job `job_id` from `scontrol show job -o <job_id>` stdout, if it can be trusted.

    Raises AmbiguousRecordError / SlurmRecordError (see the module docstring); the caller then
    reads the job from a JSON source.
    """
    validate_job_id(job_id)
    pairs = record_pairs(_one_line(text, f"job {job_id}"))
    _check_job_pairs(pairs)
    record = dict(pairs)
    if not names_job(record, job_id):
        raise SlurmRecordError(f"scontrol answered with job {record['JobId']} when asked for {job_id}")
    for key in ("NodeList", "ReqNodeList", "ExcNodeList"):
        hostnames(record, key)  # within the hostlist limits, or a SlurmRecordError now
    if "StdOut" in record and not _output_path_is_whole([key for key, _ in pairs]):
        del record["StdOut"]  # the path may run on into what looks like the next key
    return record


def node_record(text: str, name: str) -> dict[str, str]:
    """The record of node `name` from `scontrol show node -o <name>` stdout, if it can be trusted."""
    pairs = record_pairs(_one_line(text, f"node {name}"))
    for key, value in pairs:
        if key not in NODE_KEYS:
            raise AmbiguousRecordError(f"{key!r} is not a key Slurm prints for a node")
        if key != "Reason":
            _check_value(key, value, _NODE_FORMATS, frozenset({"OS", "Comment", "Extra", "AvailableFeatures",
                                                               "ActiveFeatures", "Features"}))
    record = dict(pairs)
    if "NodeName" not in record or "State" not in record:
        raise SlurmRecordError(f"node record for {name} without NodeName or State")
    if record["NodeName"] != name:
        raise SlurmRecordError(f"scontrol answered with node {record['NodeName'][:60]!r} when asked for {name}")
    return record
