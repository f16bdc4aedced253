"""sbatch options that reproduce a job from its `scontrol show job -o` record, and the tag that
marks goodput's copy of a job.

Resubmitting means running the original batch script again (`scontrol write batch_script`), but
options given on the original sbatch command line (-N2, --partition, --requeue, -o ...) are not
in the script; they survive only in the job record. Command-line options override `#SBATCH`
lines, so passing the recorded values back reproduces the job as Slurm actually ran it. A node
list the job pinned is dropped when it names an excluded node: excluding the bad node is the
point of resubmitting.

Resubmission is idempotent: a retried activity looks for the copy its first attempt made. Comments
are written by job owners, so the copy is recognised only by what no user can fake: it belongs to
the original's owner (Slurm's record, not the comment) *and* its comment carries
`goodput:resubmit-of=<id>:<token>`, where the token is an HMAC over the cluster, the original's id
and the incident, keyed with a secret only goodput holds. A user who copies a token they can see
(their own copy's comment) gains nothing: it names one original job, and only that job's owner's
jobs can match it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence

from goodput.identifiers import validate_partition
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.records import clean

RESUBMIT_TAG = "goodput:resubmit-of="
TOKEN_HEX = 32  # 128 bits of HMAC-SHA256: no one guesses it, and it keeps comments short
MIN_SECRET_BYTES = 16
# How much of a (job-controlled) comment is searched for tags, and how many tags are weighed.
MAX_COMMENT_SCAN = 16 * 1024
MAX_TAGS = 16
# Linear: at each position `\s+` either fails on the first character or takes a whole run.
_WHITESPACE_RUNS = re.compile(r"(\s+)")
_COUNT = re.compile(r"^\d+(?:-\d+)?$")
_TIME = re.compile(r"^(?:\d+-)?\d{1,2}(?::\d{2}){0,2}$")
_MEMORY = re.compile(r"^\d+[KMGT]?$")


class ResubmitKey:
    """The secret behind resubmission tokens, bound to one cluster. Never printed or logged.

    Every worker of a deployment must hold the same secret (`resubmit_key`), or a retried
    activity on another worker would not recognise the copy the first one made.
    """

    def __init__(self, secret: bytes, cluster: str = "default") -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a resubmit key needs at least {MIN_SECRET_BYTES} bytes")
        self._secret = bytes(secret)
        self.cluster = cluster

    @classmethod
    def ephemeral(cls, cluster: str = "default") -> ResubmitKey:
        """A random key for one process: copies are recognised only while it lives."""
        return cls(secrets.token_bytes(32), cluster)

    def __repr__(self) -> str:
        return f"ResubmitKey(cluster={self.cluster!r}, secret=<hidden>)"

    def token(self, job_id: str, incident_id: str = "") -> str:
        message = "\0".join(("goodput-resubmit-v1", self.cluster, job_id, incident_id)).encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()[:TOKEN_HEX]


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


def resubmit_tag(job_id: str, token: str) -> str:
    return f"{RESUBMIT_TAG}{job_id}:{token}"


def tag_comment(comment: str, job_id: str, token: str) -> str:
    """The copy's comment: `goodput:resubmit-of=ID:TOKEN`, then the original's (opt-in marker
    included, any older tag dropped). The tag goes first so that it lies within the part of a
    comment that is searched (MAX_COMMENT_SCAN) however long the owner made the rest."""
    pieces = _WHITESPACE_RUNS.split(comment or "")  # words at even indexes, separators between
    kept = []
    for index in range(0, len(pieces), 2):
        if not pieces[index].startswith(RESUBMIT_TAG):  # a tag goes with the separator before it
            kept.append((pieces[index - 1] if index else "") + pieces[index])
    return " ".join(filter(None, [resubmit_tag(job_id, token), "".join(kept).strip()]))


def resubmit_tags(comment: str) -> list[tuple[str, str]]:
    """(job id, token) of each well-formed tag in a comment, at most MAX_TAGS of them."""
    tags: list[tuple[str, str]] = []
    for word in (comment or "")[:MAX_COMMENT_SCAN].split():
        if not word.startswith(RESUBMIT_TAG):
            continue
        job_id, sep, token = word[len(RESUBMIT_TAG):].partition(":")
        if sep and job_id and token:
            tags.append((job_id, token))
            if len(tags) >= MAX_TAGS:
                break
    return tags


def resubmitted_from(comment: str) -> str | None:
    """The original's id a comment claims (for display only: claims prove nothing, see is_copy_of)."""
    tags = resubmit_tags(comment)
    return tags[0][0] if tags else None


def is_copy_of(candidate: JobInfo, original: JobInfo, token: str) -> bool:
    """True only for goodput's own copy of `original`: another job of the same owner (by uid, as
    Slurm records it) whose comment carries this original's token."""
    if original.user_id is None or candidate.user_id != original.user_id:
        return False
    if candidate.job_id == original.job_id or not token:
        return False
    return any(job_id == original.job_id and hmac.compare_digest(claimed.encode(), token.encode())
               for job_id, claimed in resubmit_tags(candidate.comment))


def find_copy(jobs: Iterable[JobInfo], original: JobInfo, token: str) -> JobInfo | None:
    """The active copy a previous attempt made, if any."""
    return next((job for job in jobs if job.state in ACTIVE_JOB_STATES and is_copy_of(job, original, token)),
                None)


def _node_count(record: Mapping[str, str]) -> str:
    """The requested node count. While a requeued job is still completing, 22.05 prints
    NumNodes as the number of nodes left to finish (1 of 2), but TRES keeps `node=2`."""
    num_nodes = clean(record.get("NumNodes"))
    if "-" in num_nodes and _COUNT.fullmatch(num_nodes):
        low, high = num_nodes.split("-")
        # a min-max range only NumNodes carries; a pending job prints `2-2` for a plain -N2
        return low if low == high else num_nodes
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


def options_from_record(record: Mapping[str, str], *, token: str, exclude: Sequence[str] = (),
                        stdout_pattern: str = "", stderr_pattern: str = "") -> list[str]:
    """sbatch options that recreate the recorded job, its comment tagged with `token`.

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
    options.append(f"--comment={tag_comment(clean(record.get('Comment')), job_id, token)}")
    options.append("--requeue" if clean(record.get("Requeue")) == "1" else "--no-requeue")
    pinned = expand_hostlist(clean(record.get("ReqNodeList")))
    if pinned and not set(pinned) & set(exclude):
        options.append(f"--nodelist={','.join(pinned)}")
    return options


def merged_exclusions(record: Mapping[str, str], exclude: Sequence[str]) -> tuple[str, ...]:
    """The job's own exclusions plus the new ones (sbatch keeps only the last --exclude)."""
    return tuple(dict.fromkeys([*expand_hostlist(clean(record.get("ExcNodeList"))), *exclude]))
