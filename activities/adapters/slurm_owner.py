"""Submitting a job's copy as its owner: the account lookups, on the host where sbatch runs.

The decisions (who the owner is, how to become them, which environment the copy gets) are pure,
in `goodput.slurm.submit_as`; this module supplies the facts they need from the host that runs
sbatch: which uid goodput has there, and that host's passwd entry for the owner (uid to compare
with Slurm's record, home and shell for the environment). Locally that is `os.geteuid` and
`pwd`; through any other runner (the SSH login node) it is `id -u` and `getent passwd NAME`, run
by that runner, because that host's account database is the one runuser and sudo will use.
"""

from __future__ import annotations

import asyncio
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from activities.adapters.slurm_runner import CommandRunner, LocalRunner
from goodput.scheduler import JobInfo
from goodput.slurm import commands
from goodput.slurm.errors import classify
from goodput.slurm.submit_as import (
    CARRIED_VARIABLES,
    DEFAULT_PATH,
    Account,
    BecomeMode,
    OwnerError,
    become_argv,
    check_account,
    job_owner,
    parse_passwd_entry,
    parse_uid,
    submission_environment,
    validate_user_name,
)

GETENT_NOT_FOUND = 2  # getent(1): "one or more supplied key could not be found in the database"


class AccountDirectory(Protocol):
    """The account database of the host that submits a resubmitted copy (the worker's, or the login node's)."""
    async def effective_uid(self) -> int:
        """The uid goodput's commands run as on the submitting host."""
        ...

    async def account(self, name: str) -> Account | None:
        """The submitting host's passwd entry for `name`; None when there is none."""
        ...


class LocalAccounts:
    """This host's account database (the worker runs sbatch itself)."""

    async def effective_uid(self) -> int:
        """This process's effective uid."""
        return os.geteuid()

    async def account(self, name: str) -> Account | None:
        """`name`'s passwd entry through NSS (run off the event loop); None when there is none."""
        validate_user_name(name)
        try:
            entry = await asyncio.to_thread(pwd.getpwnam, name)  # NSS may be LDAP: off the loop
        except KeyError:
            return None
        return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir,
                       shell=entry.pw_shell)


class RunnerAccounts:
    """The account database of wherever `runner` runs commands (e.g. the SSH login node)."""

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner
        self._uid: int | None = None

    async def effective_uid(self) -> int:
        """`id -u` on the runner's host, asked once and remembered."""
        if self._uid is None:
            result = await self._runner.run(commands.effective_uid())
            if not result.ok:
                raise classify(result.argv, result.returncode, result.stdout, result.stderr)
            uid = parse_uid(result.stdout)
            if uid is None:
                raise OwnerError(f"`id -u` printed {result.stdout[:40]!r}; cannot tell which user goodput runs as")
            self._uid = uid
        return self._uid

    async def account(self, name: str) -> Account | None:
        """`getent passwd NAME` on the runner's host; None when getent finds no such user."""
        result = await self._runner.run(commands.passwd_entry(validate_user_name(name)))
        if result.returncode == GETENT_NOT_FOUND:
            return None
        if not result.ok:
            raise classify(result.argv, result.returncode, result.stdout, result.stderr)
        return parse_passwd_entry(result.stdout, name)


def accounts_for(runner: CommandRunner) -> AccountDirectory:
    """The account database of the host `runner` runs commands on."""
    return LocalAccounts() if isinstance(runner, LocalRunner) else RunnerAccounts(runner)


@dataclass(frozen=True)
class OwnerSubmission:
    """How a copy is submitted as its owner (settings `slurm.resubmit_as`, `slurm.resubmit_path`).

    `carried` holds the Slurm client settings sbatch needs (SLURM_CONF); None means "those of
    goodput's own environment at call time", right for a worker that runs sbatch itself.
    """

    mode: BecomeMode = BecomeMode.AUTO
    path: str = DEFAULT_PATH
    carried: Mapping[str, str] | None = None

    def carried_now(self) -> dict[str, str]:
        """The carried client settings (SLURM_CONF, ...) as they are now, limited to CARRIED_VARIABLES."""
        source = os.environ if self.carried is None else self.carried
        return {key: source[key] for key in CARRIED_VARIABLES if key in source}


async def owner_account(job: JobInfo, accounts: AccountDirectory) -> Account:
    """The owner's account on the submitting host, checked against Slurm's record."""
    name, _ = job_owner(job)
    return check_account(job, await accounts.account(name))


async def owner_sbatch(job: JobInfo, sbatch_argv: Sequence[str], resume: Mapping[str, str], *,
                       accounts: AccountDirectory, submission: OwnerSubmission) -> list[str]:
    """`sbatch_argv` run as the job's owner from a clean environment (see commands.submit_as)."""
    account = await owner_account(job, accounts)
    become = become_argv(submission.mode, await accounts.effective_uid(), account)
    environment = submission_environment(account, resume=resume, path=submission.path,
                                         carried=submission.carried_now())
    return commands.submit_as(become, environment, sbatch_argv)


COMMAND_NOT_FOUND = 127  # the shell's (or env's) status when it cannot find the program


def owner_switch_failed(argv: Sequence[str], returncode: int, stderr: str) -> bool:
    """The switch itself failed (no sudoers rule, a password wanted, runuser refused or missing),
    not sbatch."""
    if not argv or argv[0] not in ("sudo", "runuser"):
        return False
    return returncode == COMMAND_NOT_FOUND or stderr.lstrip().startswith(f"{argv[0]}:")
