"""NVRx's cycle-info files: which in-job restart cycle a job is in, on which nodes and ranks.

`ft_launcher --ft-cycle-info-dir=DIR` (nvidia-resiliency-ext 0.6 and later) has the rendezvous
host write one small JSON file per restart cycle, `cycle_info.<job id>.<attempt>.<cycle>` (the
attempt is Slurm's restart count), rewritten atomically when the cycle ends, plus a symlink
`cycle_info.<job id>.current`. A job tells goodput where they are in its comment:

    sbatch --comment="goodput:opt-in goodput:nvrx-cycles=/lustre/proj/run7/nvrx"

The directory and the files belong to the job's user, so everything here treats them as hostile:
the tag is found with literal string operations and its path must be absolute, printable, without
`..`; a file is read only when its name is one of this job's cycle files, through
`open_job_file` (no symlink, no FIFO, only the owner's regular files), relative to a directory
opened without following a symlink, at most MAX_FILE_BYTES of it; the `.current` symlink is never
followed (the newest cycle is the highest number); at most MAX_ENTRIES names are looked at and
MAX_CYCLES files read. Parsing is strict: a JSON object, integers in range, short printable
strings, ISO-8601 UTC times; a file that fails is skipped and the reason reported.
"""

from __future__ import annotations

import errno
import json
import os
from datetime import UTC, datetime

from pydantic import Field

from goodput.models import Frozen
from goodput.scheduler import JobInfo
from goodput.untrusted_files import UnsafeFileError, open_job_file
from goodput.untrusted_text import bounded_int

TAG = "goodput:nvrx-cycles="
PATH_MAX = 4096
MAX_FILE_BYTES = 16 * 1024
MAX_ENTRIES = 10_000
MAX_CYCLES = 64
MAX_FIELD_CHARS = 1024
MAX_NUMBER = 10**9
_PREFIX = "cycle_info."
_JOB_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-+")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CycleInfoError(ValueError):
    """A cycle-info tag or file goodput cannot accept; the message says why."""


class CycleInfo(Frozen):
    """One restart cycle of ft_launcher, as its cycle-info file describes it."""

    job_id: str
    attempt_index: int = Field(ge=0)
    cycle_number: int = Field(ge=0)
    cycle_start_time: datetime | None = None
    cycle_end_time: datetime | None = None  # None while the cycle runs
    active_nodes: str = ""  # a Slurm node list, e.g. node[1-2]
    standby_nodes: str = ""
    active_ranks: str = ""  # e.g. 0-1
    generation: int = Field(default=0, ge=0)


class CycleReport(Frozen):
    """What a job's cycle-info directory holds for one job attempt, oldest cycle first."""

    directory: str
    cycles: tuple[CycleInfo, ...] = ()
    skipped: tuple[str, ...] = ()  # why files or the directory were not read (bounded)
    truncated: bool = False  # more cycle files than MAX_CYCLES: the oldest were left out


def cycles_tag(directory: str) -> str:
    """The comment word that names a cycle-info directory (the inverse of cycles_dir_from_comment)."""
    return TAG + _checked_dir(directory)


def cycles_dir_from_comment(comment: str) -> str | None:
    """The directory the job's comment names, or None without a goodput:nvrx-cycles token."""
    found = [word[len(TAG):] for word in comment.split() if word.startswith(TAG)]
    if not found:
        return None
    if len(found) > 1:
        raise CycleInfoError(f"{TAG} appears {len(found)} times in the comment; give it once")
    return _checked_dir(found[0])


def _checked_dir(directory: str) -> str:
    if not directory.startswith("/"):
        raise CycleInfoError(f"{TAG} needs an absolute directory, not {_excerpt(directory)}")
    if len(directory.encode("utf-8", "surrogatepass")) > PATH_MAX:
        raise CycleInfoError(f"{TAG}: the directory is longer than {PATH_MAX} bytes")
    if not directory.isprintable() or any(c.isspace() for c in directory):
        raise CycleInfoError(f"{TAG}: the directory {_excerpt(directory)} holds a control character or a space")
    if ".." in directory.split("/"):
        raise CycleInfoError(f"{TAG}: the directory {_excerpt(directory)} climbs with '..'")
    return directory


def cycle_file_key(name: str, job_id: str) -> tuple[int, int] | None:
    """(attempt, cycle) when `name` is one of the job's cycle files, else None (the .current
    symlink, temporary files, other jobs' files, anything else)."""
    if not name.startswith(_PREFIX):
        return None
    parts = name[len(_PREFIX):].split(".")
    if len(parts) != 3 or parts[0] != job_id:
        return None
    attempt, cycle = bounded_int(parts[1], max_digits=9), bounded_int(parts[2], max_digits=9)
    if attempt is None or cycle is None or str(attempt) != parts[1] or str(cycle) != parts[2]:
        return None
    return attempt, cycle


def parse_cycle_info(data: bytes) -> CycleInfo:
    """One cycle-info file; CycleInfoError for anything but a well-formed, bounded one."""
    if len(data) > MAX_FILE_BYTES:
        raise CycleInfoError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        raw = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CycleInfoError(f"not JSON: {_excerpt(str(err))}") from None
    if not isinstance(raw, dict):
        raise CycleInfoError("not a JSON object")
    job_id = _text(raw, "job_id")
    if not job_id or not set(job_id) <= _JOB_ID_CHARS or len(job_id) > 64:
        raise CycleInfoError(f"job_id {_excerpt(job_id)} is not a job id")
    return CycleInfo(job_id=job_id, attempt_index=_number(raw, "attempt_index"),
                     cycle_number=_number(raw, "cycle_number"),
                     cycle_start_time=_time(raw, "cycle_start_time"), cycle_end_time=_time(raw, "cycle_end_time"),
                     active_nodes=_text(raw, "active_nodes"), standby_nodes=_text(raw, "standby_nodes"),
                     active_ranks=_text(raw, "active_ranks"), generation=_number(raw, "generation"))


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _number(raw: dict[str, object], key: str) -> int:
    # protobuf's JSON writes 64-bit integers (generation) as strings, 32-bit ones as numbers
    value = raw.get(key, 0)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        number = bounded_int(value, max_digits=10)
        value = number if number is not None else value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NUMBER:
        raise CycleInfoError(f"{key} is not a count: {_excerpt(repr(value))}")
    return value


def _text(raw: dict[str, object], key: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise CycleInfoError(f"{key} is not a string")
    if len(value) > MAX_FIELD_CHARS or not value.isprintable():
        raise CycleInfoError(f"{key} is longer than {MAX_FIELD_CHARS} characters or holds a control character")
    return value


def _time(raw: dict[str, object], key: str) -> datetime | None:
    text = _text(raw, key)
    if not text:
        return None
    if len(text) > 40 or not text.endswith("Z"):
        raise CycleInfoError(f"{key} {_excerpt(text)} is not an ISO-8601 UTC time")
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    except ValueError:
        raise CycleInfoError(f"{key} {_excerpt(text)} is not an ISO-8601 UTC time") from None


def _excerpt(text: str, limit: int = 60) -> str:
    shown = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return repr(shown + ("…" if len(text) > limit else ""))


def read_cycles(directory: str, job_id: str, attempt: int, *, owner_uid: int | None) -> CycleReport:
    """The job attempt's cycles from `directory` (see the module's rules); never raises for what
    the directory holds: what could not be read is in `skipped`."""
    report = CycleReport(directory=directory)
    try:
        dir_fd = os.open(_checked_dir(directory), _DIR_FLAGS)
    except CycleInfoError as err:
        return report.model_copy(update={"skipped": (str(err),)})
    except FileNotFoundError:
        return report.model_copy(update={"skipped": (f"{directory} does not exist (yet)",)})
    except OSError as err:
        why = ("is a symbolic link or not a directory" if err.errno in (errno.ELOOP, errno.ENOTDIR)
               else f"cannot be opened ({err.strerror})")
        return report.model_copy(update={"skipped": (f"{directory} {why}",)})
    try:
        if owner_uid is not None and os.fstat(dir_fd).st_uid != owner_uid:
            return report.model_copy(update={"skipped": (
                f"{directory} is not owned by the job's owner (uid {owner_uid})",)})
        names: list[tuple[tuple[int, int], str]] = []
        truncated = False
        with os.scandir(dir_fd) as entries:
            for index, entry in enumerate(entries):
                if index >= MAX_ENTRIES:
                    truncated = True
                    break
                key = cycle_file_key(entry.name, job_id)
                if key is not None and key[0] == attempt:
                    names.append((key, entry.name))
        names.sort()
        if len(names) > MAX_CYCLES:
            names, truncated = names[-MAX_CYCLES:], True
        cycles: list[CycleInfo] = []
        skipped: list[str] = []
        for (_, cycle), name in names:
            try:
                info = _read_one(dir_fd, name, owner_uid)
            except (CycleInfoError, UnsafeFileError) as err:
                skipped.append(f"{name}: {err}")
                continue
            except OSError as err:  # gone between the listing and the open: replaced atomically
                skipped.append(f"{name}: {err.strerror}")
                continue
            if (info.job_id, info.attempt_index, info.cycle_number) != (job_id, attempt, cycle):
                skipped.append(f"{name}: its contents name job {info.job_id} attempt {info.attempt_index} "
                               f"cycle {info.cycle_number}")
                continue
            cycles.append(info)
        return report.model_copy(update={"cycles": tuple(cycles), "skipped": tuple(skipped[:8]),
                                         "truncated": truncated})
    finally:
        os.close(dir_fd)


def _read_one(dir_fd: int, name: str, owner_uid: int | None) -> CycleInfo:
    fd = open_job_file(name, owner_uid=owner_uid, dir_fd=dir_fd)
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return parse_cycle_info(b"".join(chunks))


def summarize(report: CycleReport, attempt: int) -> str:
    """One line for the incident: how many cycles the launcher ran in this attempt, the newest
    one's nodes and ranks, and whether it still runs."""
    if not report.cycles:
        why = f" ({report.skipped[0]})" if report.skipped else ""
        return f"NVRx cycle info in {report.directory}: no cycle recorded for attempt {attempt}{why}"
    newest = report.cycles[-1]
    restarts = newest.cycle_number
    parts = [f"NVRx cycle info: cycle {newest.cycle_number} of attempt {attempt}"
             f" ({restarts} in-job restart{'s' if restarts != 1 else ''} so far)"]
    if newest.active_nodes:
        parts.append(f"on {newest.active_nodes}")
    if newest.active_ranks:
        parts.append(f"ranks {newest.active_ranks}")
    if newest.standby_nodes:
        parts.append(f"standby {newest.standby_nodes}")
    if newest.cycle_start_time is not None:
        parts.append(f"started {newest.cycle_start_time:%Y-%m-%dT%H:%M:%SZ}")
    parts.append(f"ended {newest.cycle_end_time:%Y-%m-%dT%H:%M:%SZ}" if newest.cycle_end_time is not None
                 else "still running")
    if report.skipped:
        parts.append(f"{len(report.skipped)} file(s) skipped: {report.skipped[0]}")
    return " ".join(parts)



def cycle_note(job: JobInfo) -> str:
    """The incident's line about the job's launcher cycles, read now; "" when the job names no
    cycle-info directory. Blocking (it reads files): run it off the event loop."""
    try:
        directory = cycles_dir_from_comment(job.comment)
    except CycleInfoError as err:
        return f"NVRx cycle info not read: {err}"
    if directory is None:
        return ""
    return summarize(read_cycles(directory, job.job_id, job.restart_count, owner_uid=job.user_id), job.restart_count)
