"""Slurm's commands on a login node over SSH, for workers that do not run on the cluster.

The SSH backend is the CLI backend with another runner: the same argv lists (validated,
never assembled from strings) are quoted item by item with `shlex.quote`, because an SSH
"exec" request is one command line for the remote shell. One connection is opened lazily and
reused; a dropped connection is reopened on the next call.

Every command starts in "/" on the login node (`cd / && ...`), so the login user's home never
becomes a job's submit directory. Resubmissions run as the job's owner there too (runuser when the
login user is root, `sudo -n -u OWNER` when configured), with the login node's account database
deciding who the owner is (`slurm_owner.RunnerAccounts`).

Host keys are always verified against the known_hosts file the operator provides: there is no
option to skip verification, because a worker that drains nodes and cancels jobs must not talk
to whoever answers on port 22. A key mismatch is a permanent error (retrying cannot fix it).
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import asyncssh

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import OwnerSubmission
from activities.adapters.slurm_runner import DEFAULT_TIMEOUT_S, MAX_OUTPUT, CommandResult
from goodput.scheduler import PermanentSchedulerError, TransientSchedulerError
from goodput.slurm.optin import DEFAULT_MARKER
from goodput.slurm.resubmit import ResubmitKey
from goodput.slurm.submit_as import DEFAULT_PATH, BecomeMode

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SshRunner:
    """Implements `slurm_runner.CommandRunner` by running argv on `host` over SSH."""

    def __init__(self, host: str, *, known_hosts: Path, username: str | None = None, port: int = 22,
                 client_keys: Sequence[Path] = (), env: Mapping[str, str] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, connect_timeout_s: float = 10.0) -> None:
        if not Path(known_hosts).is_file():
            raise PermanentSchedulerError(f"known_hosts file {known_hosts} does not exist; "
                                          "host keys are always verified")
        for key in env or {}:
            if not _ENV_KEY.fullmatch(key):
                raise PermanentSchedulerError(f"invalid environment variable name {key[:60]!r}")
        self._host = host
        self._port = port
        self._username = username
        self._known_hosts = str(known_hosts)
        self._client_keys = [str(k) for k in client_keys]
        self._env = dict(env or {})
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    @property
    def environment(self) -> dict[str, str]:
        """The variables every remote command gets (e.g. SLURM_CONF)."""
        return dict(self._env)

    def remote_command(self, argv: Sequence[str]) -> str:
        """The one line the remote shell runs: from "/", `env K=V` first when an environment is set."""
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(self._env.items()))] if self._env else []
        return "cd / && " + shlex.join([*prefix, *argv])

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            try:
                self._conn = await asyncssh.connect(
                    self._host, port=self._port, username=self._username,
                    known_hosts=self._known_hosts,
                    client_keys=self._client_keys or (),
                    agent_path=None if self._client_keys else (),
                    config=None,  # ~/.ssh/config must not redirect or weaken the connection
                    connect_timeout=self._connect_timeout_s)
            except asyncssh.HostKeyNotVerifiable as exc:
                raise PermanentSchedulerError(
                    f"ssh {self._host}:{self._port}: host key not in {self._known_hosts}: {exc}") from None
            except asyncssh.PermissionDenied as exc:
                raise PermanentSchedulerError(f"ssh {self._host}:{self._port}: {exc}") from None
            except (OSError, asyncssh.Error, TimeoutError) as exc:
                raise TransientSchedulerError(
                    f"ssh {self._host}:{self._port}: {type(exc).__name__}: {exc}") from None
            return self._conn

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if not argv or any(not isinstance(a, str) or "\x00" in a for a in argv):
            raise PermanentSchedulerError(f"refusing malformed argv {list(argv)[:3]!r}")
        conn = await self._connection()
        limit = timeout_s if timeout_s is not None else self._timeout_s
        try:
            completed = await asyncio.wait_for(
                conn.run(self.remote_command(argv), input=stdin, check=False, encoding=None),
                timeout=limit)
        except TimeoutError:
            await self.close()  # the remote command may still run; a fresh channel next time
            raise TransientSchedulerError(f"ssh {self._host}: {argv[0]} gave no answer within "
                                          f"{limit:g} s") from None
        except (OSError, asyncssh.Error) as exc:
            await self.close()
            raise TransientSchedulerError(f"ssh {self._host}: {type(exc).__name__}: {exc}") from None
        status = completed.exit_status
        return CommandResult(argv=tuple(argv), returncode=status if status is not None else -1,
                             stdout=_text(completed.stdout), stderr=_text(completed.stderr))

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data[:MAX_OUTPUT].decode("utf-8", "replace")
    return str(data or "")[:MAX_OUTPUT]


def slurm_ssh_backend(host: str, *, known_hosts: Path, username: str | None = None, port: int = 22,
                      client_keys: Sequence[Path] = (), env: Mapping[str, str] | None = None,
                      allow_partitions: Collection[str] = (), comment_marker: str = DEFAULT_MARKER,
                      enforce_opt_in: bool = True, resubmit_key: ResubmitKey | None = None,
                      resubmit_as: BecomeMode = BecomeMode.AUTO, resubmit_path: str = DEFAULT_PATH,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[SlurmCliBackend, SshRunner]:
    """A CLI backend whose commands run on `host`; close the runner when done.

    A resubmission's sbatch gets the runner's Slurm client settings (SLURM_CONF in `env`), not
    the worker's.
    """
    runner = SshRunner(host, known_hosts=known_hosts, username=username, port=port,
                       client_keys=client_keys, env=env, timeout_s=timeout_s)
    submission = OwnerSubmission(mode=resubmit_as, path=resubmit_path, carried=runner.environment)
    backend = SlurmCliBackend(runner, allow_partitions=allow_partitions, comment_marker=comment_marker,
                              enforce_opt_in=enforce_opt_in, resubmit_key=resubmit_key, submission=submission)
    return backend, runner
