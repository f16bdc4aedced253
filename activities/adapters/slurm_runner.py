"""How a Slurm command is executed: the seam between the CLI backend and a process.

`SlurmCliBackend` only builds argv lists and parses text; a `CommandRunner` runs them. The local
runner here uses `asyncio.create_subprocess_exec` (never a shell) with a deadline; the SSH
backend supplies a runner that executes the same argv on a login node; the chroot runner runs it
with a Debian root's own (newer) Slurm, as the version-matrix lab does; tests inject fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from goodput.scheduler import PermanentSchedulerError, TransientSchedulerError

DEFAULT_TIMEOUT_S = 30.0
MAX_OUTPUT = 64 * 1024 * 1024


@dataclass(frozen=True)
class CommandResult:
    """A finished command: its argv, exit status and decoded output (bounded by MAX_OUTPUT)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.returncode == 0


@runtime_checkable
class CommandRunner(Protocol):
    """Runs one Slurm command's argv somewhere (this host, a login node over SSH); never through a shell."""
    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        """Run argv; a non-zero exit is a result, not an exception. Timeouts and a missing
        binary raise Transient/PermanentSchedulerError."""
        ...


class LocalRunner:
    """Runs Slurm commands on this host (goodput's worker on a head or login node).

    Every command starts in `cwd` ("/"), so the worker's own directory never shows through (as a
    job's submit directory, or a relative path resolved against it).
    """

    def __init__(self, *, env: Mapping[str, str] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, cwd: str = "/") -> None:
        # SLURM_CONF etc. are read at call time unless given, so a fixture can export them late
        self._env = dict(env) if env is not None else None
        self._timeout_s = timeout_s
        self._cwd = cwd

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        """Run argv in `cwd` with the configured environment; see `CommandRunner.run`."""
        if not argv or any(not isinstance(a, str) or "\x00" in a for a in argv):
            raise PermanentSchedulerError(f"refusing malformed argv {list(argv)[:3]!r}")
        env = {**os.environ, **self._env} if self._env is not None else None
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=self._cwd,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            raise PermanentSchedulerError(f"{argv[0]}: not installed on this host") from None
        except PermissionError as exc:
            raise PermanentSchedulerError(f"{argv[0]}: {exc}") from None
        limit = timeout_s if timeout_s is not None else self._timeout_s
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), timeout=limit)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise TransientSchedulerError(f"{argv[0]} {argv[1] if len(argv) > 1 else ''}: "
                                          f"no answer within {limit:g} s") from None
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        assert process.returncode is not None
        return CommandResult(argv=tuple(argv), returncode=process.returncode,
                             stdout=out[:MAX_OUTPUT].decode("utf-8", "replace"),
                             stderr=err[:MAX_OUTPUT].decode("utf-8", "replace"))


class ChrootRunner:
    """Runs Slurm commands from a Debian root's own binaries (`chroot ROOT argv…`) on this host.

    The lab runs a newer Slurm than the host's inside such a root (scripts/slurm-lab/root.sh);
    this runner lets the CLI backend speak to it with that Slurm's own clients, whose output is
    what a site on that version sees. Accounts (id, getent) are the root's too, since they are
    asked through the runner. Like `LocalRunner`, never a shell; root must be an absolute path.
    """

    def __init__(self, root: str, *, env: Mapping[str, str] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, chroot: str = "/usr/sbin/chroot") -> None:
        if not os.path.isabs(root) or "\x00" in root or not os.path.normpath(root).strip("/"):
            raise PermanentSchedulerError(f"chroot root must be an absolute path other than /: {root!r}")
        self._root = os.path.normpath(root)
        self._chroot = chroot
        self._local = LocalRunner(env=env, timeout_s=timeout_s)

    @property
    def root(self) -> str:
        """The root the commands run in."""
        return self._root

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        """Run argv inside the root; the result names argv as given (not the chroot wrapper)."""
        if not argv or any(not isinstance(a, str) or "\x00" in a for a in argv):
            raise PermanentSchedulerError(f"refusing malformed argv {list(argv)[:3]!r}")
        result = await self._local.run([self._chroot, self._root, *argv], stdin=stdin, timeout_s=timeout_s)
        # chroot(1) exits 127 when the command is missing in the root, 125/126 when it cannot run it
        first = result.stderr.partition("\n")[0]
        if result.returncode in (125, 126, 127) and first.startswith(f"{self._chroot}: "):
            raise PermanentSchedulerError(f"{argv[0]} in {self._root}: {first[:200]}")
        return CommandResult(argv=tuple(argv), returncode=result.returncode, stdout=result.stdout,
                             stderr=result.stderr)
