"""sbatch options that reproduce a job from its `scontrol show job -o` record.

Resubmitting means running the original batch script again (`scontrol write batch_script`), but
options given on the original sbatch command line (-N2, --partition, --requeue, -o ...) are not
in the script; they survive only in the job record. Command-line options override `#SBATCH`
lines, so passing the recorded values back reproduces the job as Slurm actually ran it. A node
list the job pinned is dropped when it names an excluded node: excluding the bad node is the
point of resubmitting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from goodput.identifiers import validate_partition
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.records import clean

RESUBMIT_TAG = "goodput:resubmit-of="
_TAG = re.compile(r"\s*goodput:resubmit-of=\S*")
_COUNT = re.compile(r"^\d+(?:-\d+)?$")
_TIME = re.compile(r"^(?:\d+-)?\d{1,2}(?::\d{2}){0,2}$")
_MEMORY = re.compile(r"^\d+[KMGT]?$")


def _gres_from_tres(value: str) -> str:
    """`gres:gpu:1` (22.05) or `gres/gpu:1,gres/nic:2` (23.02+) -> 'gpu:1,nic:2'."""
    parts = []
    for item in value.split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                parts.append(item[len(prefix):])
                break
    return ",".join(parts)


def tag_comment(comment: str, job_id: str) -> str:
    """The copy's comment: the original's (opt-in marker included) plus `goodput:resubmit-of=ID`.

    The tag makes resubmission idempotent: before submitting, the backend looks for an active
    job carrying it, so a retried activity finds the copy its first attempt made.
    """
    return " ".join(filter(None, [_TAG.sub("", comment).strip(), f"{RESUBMIT_TAG}{job_id}"]))


def resubmitted_from(comment: str) -> str | None:
    match = re.search(r"goodput:resubmit-of=(\S+)", comment or "")
    return match.group(1) if match else None


def _node_count(record: Mapping[str, str]) -> str:
    """The requested node count. While a requeued job is still completing, 22.05 prints
    NumNodes as the number of nodes left to finish (1 of 2), but TRES keeps `node=2`."""
    num_nodes = clean(record.get("NumNodes"))
    if "-" in num_nodes and _COUNT.fullmatch(num_nodes):
        return num_nodes  # a min-max range only NumNodes carries
    tres = dict(item.split("=", 1) for item in clean(record.get("TRES")).split(",") if "=" in item)
    from_tres = tres.get("node", "")
    if from_tres.isdigit() and (not num_nodes.isdigit() or int(from_tres) > int(num_nodes)):
        return from_tres
    return num_nodes if _COUNT.fullmatch(num_nodes) else ""


def output_pattern(expanded: str, job_id: str) -> str:
    """Best effort `%j` for a path whose job id was already expanded (`out-1234.log`).

    Used only when the submitted pattern is unavailable; replaces the id in the file name when
    it stands alone between non-digits, so the new job writes its own file.
    """
    if not expanded:
        return ""
    head, sep, name = expanded.rpartition("/")
    base_id = job_id.split("_")[0].split("+")[0]
    replaced = re.sub(rf"(?<!\d){re.escape(base_id)}(?!\d)", "%j", name, count=1)
    return f"{head}{sep}{replaced}"


def options_from_record(record: Mapping[str, str], *, exclude: Sequence[str] = (),
                        stdout_pattern: str = "", stderr_pattern: str = "") -> list[str]:
    """sbatch options that recreate the recorded job.

    --exclude (see `merged_exclusions`), --export and --hold are added by `commands.sbatch`.
    """
    options: list[str] = []
    job_id = clean(record.get("JobId"))

    def add(flag: str, key: str, pattern: re.Pattern[str] | None = None) -> None:
        value = clean(record.get(key))
        if value and (pattern is None or pattern.fullmatch(value)):
            options.append(f"--{flag}={value}")

    add("job-name", "JobName")
    partition = clean(record.get("Partition"))
    if partition:
        options.append(f"--partition={validate_partition(partition.split(',')[0])}")
    nodes = _node_count(record)
    if nodes:
        options.append(f"--nodes={nodes}")
    per_node = clean(record.get("NtasksPerN:B:S:C")).split(":")[0]
    if per_node.isdigit() and int(per_node) > 0:
        options.append(f"--ntasks-per-node={per_node}")
    else:
        add("ntasks", "NumTasks", _COUNT)
    add("cpus-per-task", "CPUs/Task", re.compile(r"^\d+$"))
    add("account", "Account")
    add("qos", "QOS")
    add("constraint", "Features")
    add("reservation", "Reservation")
    time_limit = clean(record.get("TimeLimit"))
    if time_limit and _TIME.fullmatch(time_limit):
        options.append(f"--time={time_limit}")
    memory = clean(record.get("MinMemoryNode"))
    if memory and memory != "0" and _MEMORY.fullmatch(memory):
        options.append(f"--mem={memory}")
    memory_cpu = clean(record.get("MinMemoryCPU"))
    if memory_cpu and memory_cpu != "0" and _MEMORY.fullmatch(memory_cpu):
        options.append(f"--mem-per-cpu={memory_cpu}")
    gres = _gres_from_tres(clean(record.get("TresPerNode")))
    if gres:
        options.append(f"--gres={gres}")
    add("chdir", "WorkDir")
    stdout = stdout_pattern or output_pattern(clean(record.get("StdOut")), job_id)
    stderr = stderr_pattern or output_pattern(clean(record.get("StdErr")), job_id)
    if stdout:
        options.append(f"--output={stdout}")
    if stderr and stderr != stdout:
        options.append(f"--error={stderr}")
    options.append(f"--comment={tag_comment(clean(record.get('Comment')), job_id)}")
    options.append("--requeue" if clean(record.get("Requeue")) == "1" else "--no-requeue")
    pinned = expand_hostlist(clean(record.get("ReqNodeList")))
    if pinned and not set(pinned) & set(exclude):
        options.append(f"--nodelist={','.join(pinned)}")
    return options


def merged_exclusions(record: Mapping[str, str], exclude: Sequence[str]) -> tuple[str, ...]:
    """The job's own exclusions plus the new ones (sbatch keeps only the last --exclude)."""
    return tuple(dict.fromkeys([*expand_hostlist(clean(record.get("ExcNodeList"))), *exclude]))
