"""The output paths `scontrol show job` prints, rebuilt from the patterns 22.05's JSON carries.

Slurm 22.05's `squeue --json` gives `standard_output` as submitted (`out-%j.log`, or '' for the
default), while `scontrol show job` prints the file (`/work/out-8.log`). When the CLI backend
reads one job from JSON (its text record was ambiguous), the log watchers still need the file,
so this repeats scontrol's expansion: `%%`, `%A`, `%a`, `%j`, `%u`, `%x` with an optional width,
relative paths under the working directory, and `slurm-%j.out` (or `slurm-%A_%a.out`) when no
path was given. Other `%` sequences stay as they are, as scontrol leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_VAL = 4294967294  # what Slurm prints for "no array task"
MAX_PATTERN = 4096


@dataclass(frozen=True)
class JobNames:
    """What a pattern can refer to."""

    job_id: int
    array_job_id: int
    array_task_id: int | None
    user: str
    name: str
    work_dir: str


def _field(spec: str, job: JobNames) -> str | None:
    if spec == "A":
        return str(job.array_job_id if job.array_task_id is not None and job.array_job_id else job.job_id)
    if spec == "a":
        return str(job.array_task_id if job.array_task_id is not None else NO_VAL)
    if spec == "j":
        return str(job.job_id)
    if spec == "u":
        return job.user
    if spec == "x":
        return job.name
    return None


def expand(pattern: str, job: JobNames) -> str:
    """One pattern as scontrol prints it (absolute, fields filled in)."""
    pattern = pattern[:MAX_PATTERN]
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char != "%" or index + 1 >= len(pattern):
            out.append(char)
            index += 1
            continue
        if pattern[index + 1] == "%":
            out.append("%")
            index += 2
            continue
        end = index + 1
        while end < len(pattern) and pattern[end].isascii() and pattern[end].isdigit():
            end += 1
        digits = pattern[index + 1:end]
        width = 0 if not digits else (10 if len(digits) > 1 and int(digits[:20]) > 9 else int(digits[:20]))
        value = _field(pattern[end], job) if end < len(pattern) else None
        if value is None:
            out.append(pattern[index:end])
            index = end
            continue
        out.append(value.zfill(width) if value.isdigit() else value)
        index = end + 1
    path = "".join(out)
    return path if path.startswith("/") else f"{job.work_dir}/{path}"


def default_output(job: JobNames) -> str:
    if job.array_job_id:
        return f"{job.work_dir}/slurm-{job.array_job_id}_{_field('a', job)}.out"
    return f"{job.work_dir}/slurm-{job.job_id}.out"


def output_paths(stdout: str, stderr: str, batch: bool, job: JobNames) -> tuple[str, str]:
    """(StdOut, StdErr) as scontrol prints them: stderr falls back to stdout, non-batch jobs have none."""
    if not batch:
        return (expand(stdout, job) if stdout else "", expand(stderr, job) if stderr else "")
    out = expand(stdout, job) if stdout else default_output(job)
    err = expand(stderr, job) if stderr else out
    return out, err
