"""Several jobs' status in one `scontrol` process, each job asked for by its own id (#29).

A storm's status polls of one tick used to be one `squeue -j 1,2,3`. squeue filters a list of
jobs on the client: slurmctld packs every job of the cluster for it (only a single `-j` is looked
up by slurmctld; Slurm's src/squeue/squeue.c), so each tick's read cost slurmctld the whole job
table, more as the cluster grows. `scontrol` reads commands from its standard input, so one
process can send one `show job <id>` per job: each a single job lookup at slurmctld, whatever the
cluster's size. Still one command per tick, as the issue counts them.

The text form prints what a job's owner wrote raw, newlines included, so an answer is split only
at lines no job can forge: between two jobs the script asks `show hostnames <mark>`, which
scontrol prints back locally (no RPC), and `<mark>` holds a secret made per process and never
shown. The part between two marks is the answer to exactly one `show job`; it is kept only when
it is one record line (scontrol's echo of the commands aside), and then judged as strictly as any
record (goodput.slurm.unambiguous.job_record, the job asked for). Anything else is missing, and the
caller reads that job alone, the trusted way.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence

from goodput.scheduler import JobStatus, status_of
from goodput.slurm.batch import MAX_BATCH, job_list, local_time
from goodput.slurm.errors import SlurmRecordError
from goodput.slurm.records import job_from_record
from goodput.slurm.unambiguous import job_record

Argv = list[str]
_NONCE = re.compile(r"[0-9a-f]{32}")
PROMPT = "scontrol: "  # scontrol's prompt, with the command echoed, when it reads a pipe
MAX_ANSWER_LINES = MAX_BATCH * 8


def new_nonce() -> str:
    """A mark no job can have guessed: 128 random bits, made once per process."""
    return secrets.token_hex(16)


def mark(nonce: str, index: int) -> str:
    if not _NONCE.fullmatch(nonce):
        raise ValueError("a mark's nonce is 32 lowercase hex digits")
    return f"goodput-{nonce}-{index}"


def show_jobs_argv() -> Argv:
    """scontrol reading its commands from standard input, one record per line (`-o`)."""
    return ["scontrol", "-o"]


def show_jobs_script(job_ids: Sequence[str], nonce: str) -> bytes:
    """`show job <id>` for each job, each between two marks; the ids are plain job numbers
    (`job_list` refuses anything else), so no byte of the script is a job's."""
    job_list(job_ids)
    lines = []
    for index, job_id in enumerate(job_ids):
        lines += [f"show hostnames {mark(nonce, index)}", f"show job {job_id}"]
    lines += [f"show hostnames {mark(nonce, len(job_ids))}", "quit"]
    return ("\n".join(lines) + "\n").encode()


def job_answers(stdout: str, job_ids: Sequence[str], nonce: str) -> dict[str, str]:
    """Each job's own answer line, by id; a job whose part is not exactly one line is left out.

    The marks must come back exactly once each and in order, else nothing is believed."""
    lines = stdout.splitlines()
    if len(lines) > MAX_ANSWER_LINES + 4 * len(job_ids) + 4:
        return {}
    marks = [mark(nonce, index) for index in range(len(job_ids) + 1)]
    at = [i for i, line in enumerate(lines) if line.strip() in marks]
    if [lines[i].strip() for i in at] != marks:
        return {}
    answers: dict[str, str] = {}
    for index, job_id in enumerate(job_ids):
        echoes = {f"show job {job_id}", f"show hostnames {marks[index + 1]}", ""}
        part = [line for line in lines[at[index] + 1:at[index + 1]]
                if line.removeprefix(PROMPT).strip() not in echoes]
        if len(part) == 1:
            answers[job_id] = part[0]
    return answers


def job_statuses(stdout: str, job_ids: Sequence[str], nonce: str) -> Mapping[str, JobStatus]:
    """The status of each job whose answer is one trusted record of that very job."""
    statuses: dict[str, JobStatus] = {}
    for job_id, line in job_answers(stdout, job_ids, nonce).items():
        try:
            record = job_record(line + "\n", job_id)
            status = status_of(job_from_record(record))
            eligible = local_time(record.get("EligibleTime", ""))
        except (SlurmRecordError, ValueError):  # a record that reads more than one way, or a bad date
            continue
        statuses[job_id] = status.model_copy(update={"eligible_at": eligible})
    return statuses
