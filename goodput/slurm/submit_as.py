"""Who a resubmitted job runs as, and with what environment: its owner, never goodput.

goodput runs as a Slurm operator (root on many sites). Feeding a job's batch script -- the
owner's bytes -- to `sbatch` as that account would run it as goodput, and sbatch's default
`--export=ALL` would hand the job goodput's environment (push tokens, webhook URLs, JWTs). So the
copy is submitted *by its owner*: goodput switches to the owner's account (`runuser` as root,
`sudo -n` where configured) and starts sbatch from an empty environment (`env -i`) holding only
the owner's identity, a fixed PATH, the Slurm client settings goodput was given, and the
GOODPUT_* resume values. The owner is Slurm's record of it (never the job's comment), and the
account on the submitting host must have the same uid, or goodput refuses: it never falls back
to submitting someone else's job as itself.

Pure decisions, shared by the CLI, SSH and pyslurm backends; docs/slurm.md ("How resubmission
runs") explains the mechanism and its limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum

from pydantic import Field

from goodput.models import Frozen
from goodput.scheduler import JobInfo, PermanentSchedulerError

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Slurm client settings a resubmission's sbatch still needs (where the controller is).
CARRIED_VARIABLES = ("SLURM_CONF",)
RESUME_PREFIX = "GOODPUT_"
MAX_USER_NAME = 64
MAX_PASSWD_LINE = 4096
MAX_ENV_VALUE = 4096
# POSIX-portable names plus `.` and `@` (SSSD/AD users): no leading `-` (an option), no digits
# only (sudo and runuser would read a uid), nothing a shell or argv parser treats specially.
_USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.@-]{0,63}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_UID = re.compile(r"^[0-9]{1,10}$")


class OwnerError(PermanentSchedulerError):
    """goodput cannot submit as the job's owner, so it submits nothing."""


class BecomeMode(StrEnum):
    """How goodput becomes a job's owner to submit its copy."""

    AUTO = "auto"  # as the owner already: nothing; as root: runuser; otherwise refuse
    RUNUSER = "runuser"  # root only
    SUDO = "sudo"  # `sudo -n -u OWNER -- env -i ... sbatch ...`; needs a sudoers rule


class Account(Frozen):
    """A passwd entry of the host where sbatch runs."""

    name: str
    uid: int = Field(ge=0, le=2**32 - 1)
    gid: int = Field(ge=0, le=2**32 - 1)
    home: str = ""
    shell: str = ""


def validate_user_name(name: str) -> str:
    if not isinstance(name, str) or len(name) > MAX_USER_NAME or not _USER_NAME.fullmatch(name):
        raise OwnerError(f"owner name {str(name)[:MAX_USER_NAME]!r} is not a user name goodput will pass "
                         "to runuser/sudo")
    return name


def job_owner(job: JobInfo) -> tuple[str, int]:
    """(name, uid) of the job's owner as Slurm records it; refuses when Slurm did not say."""
    if not job.user or job.user_id is None:
        raise OwnerError(f"the owner of job {job.job_id} is unknown (Slurm reported user "
                         f"{job.user or '?'!r}, uid {job.user_id}); goodput resubmits a job only as its owner")
    return validate_user_name(job.user), job.user_id


def check_account(job: JobInfo, account: Account | None) -> Account:
    """The submitting host's account for the job's owner, which must match Slurm's record."""
    name, uid = job_owner(job)
    if account is None:
        raise OwnerError(f"job {job.job_id} belongs to {name} (uid {uid}), who has no account on the "
                         "host that would submit the copy; goodput will not submit it as anyone else")
    if account.name != name or account.uid != uid:
        raise OwnerError(f"job {job.job_id} belongs to {name} (uid {uid}) in Slurm, but this host's "
                         f"{account.name} has uid {account.uid}; refusing to resubmit")
    return account


def become_argv(mode: BecomeMode, self_uid: int, owner: Account) -> list[str]:
    """The prefix that runs the rest of an argv as `owner`; empty when goodput is the owner."""
    if self_uid == owner.uid:
        return []
    name = validate_user_name(owner.name)
    if mode is BecomeMode.SUDO:
        return ["sudo", "-n", "-u", name, "--"]
    if self_uid == 0:
        return ["runuser", "-u", name, "--"]
    hint = ("runuser needs root" if mode is BecomeMode.RUNUSER
            else 'set slurm.resubmit_as = "sudo" with a sudoers rule, or run goodput as root')
    raise OwnerError(f"goodput runs as uid {self_uid} and cannot submit as {name} (uid {owner.uid}): {hint}")


def _value(key: str, value: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\0" in value \
            or any(not ch.isprintable() for ch in value):
        raise OwnerError(f"environment value of {key} is not one printable line of at most "
                         f"{MAX_ENV_VALUE} characters")
    return value


def submission_environment(owner: Account, *, resume: Mapping[str, str], path: str = DEFAULT_PATH,
                           carried: Mapping[str, str] | None = None) -> dict[str, str]:
    """sbatch's whole environment, which `--export=ALL` makes the copy's.

    The owner's identity (HOME, USER, LOGNAME, SHELL from the account database), a fixed PATH, the
    Slurm client settings in `carried` (only CARRIED_VARIABLES) and the resume values, which must
    be GOODPUT_* names so they cannot override any of the others.
    """
    env = {key: _value(key, value) for key, value in (carried or {}).items() if key in CARRIED_VARIABLES}
    env |= {"HOME": _value("HOME", owner.home or "/"), "USER": owner.name, "LOGNAME": owner.name,
            "PATH": _value("PATH", path)}
    if owner.shell:
        env["SHELL"] = _value("SHELL", owner.shell)
    for key, value in resume.items():
        if not isinstance(key, str) or not _ENV_KEY.fullmatch(key) or not key.startswith(RESUME_PREFIX):
            raise OwnerError(f"resubmission may only add {RESUME_PREFIX}* variables, not {str(key)[:60]!r}")
        env[key] = _value(key, value)
    return env


def parse_passwd_entry(text: str, name: str) -> Account | None:
    """`getent passwd NAME` output -> the Account; None when it names no such user."""
    line = (text or "")[:MAX_PASSWD_LINE].split("\n", 1)[0].strip()
    fields = line.split(":")
    if len(fields) != 7 or fields[0] != name:
        return None
    if not _UID.fullmatch(fields[2]) or not _UID.fullmatch(fields[3]):
        return None
    uid, gid = int(fields[2]), int(fields[3])
    if uid > 2**32 - 1 or gid > 2**32 - 1:
        return None
    return Account(name=name, uid=uid, gid=gid, home=fields[5], shell=fields[6])


def parse_uid(text: str) -> int | None:
    """`id -u` output -> the uid; None when unreadable."""
    value = (text or "")[:64].strip()
    if not _UID.fullmatch(value) or int(value) > 2**32 - 1:
        return None
    return int(value)
