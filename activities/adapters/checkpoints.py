"""The real checkpoint finder: discovery in a child process running as the job's owner.

goodput (root here) never reads a job's checkpoint tree with its own privileges when Slurm says
who owns the job: it starts `python -I -m goodput.checkpoints.reader` in its own session, with
an empty environment and `/` as working directory, and sends it the request and the owner's uid,
gid and supplementary groups as JSON; the child drops to them itself before it reads anything
(see goodput.checkpoints.reader for why there and not before exec). The report comes back as
JSON, at most MAX_REPORT_BYTES, validated by pydantic (no pickle). The child's process group is
killed after `timeout_s`, so a tree on a hung filesystem costs a timeout ("checkpoint discovery
timed out"), never a stuck worker. A report that names a checkpoint outside the configured root
is discarded. When goodput is not root, or the owner is unknown, `InProcessFinder` does the
discovery with the same bounds, and the finding says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import sys
from collections.abc import Callable

from pydantic import ValidationError

from goodput.checkpoints import (
    CheckpointFinder,
    FinderRequest,
    Finding,
    InProcessFinder,
    ReadMode,
    ResumeChoice,
)
from goodput.checkpoints.finder import in_process_reason, owner_label
from goodput.checkpoints.fs import within_root
from goodput.checkpoints.reader import ChildReport, ChildRequest, DropTo

MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_DIAGNOSTIC_BYTES = 16 * 1024
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# Beyond the child's own budget (ScanLimits.max_seconds): interpreter start-up and the report.
GRACE_S = 15.0


def identity_of(request: FinderRequest) -> DropTo | str | None:
    """Whom the child becomes: the owner's uid, gid and groups; None for a root-owned job (read
    as root, still in a bounded child); or why the owner's identity cannot be determined."""
    uid = request.owner_uid
    if uid is None:
        return "the job's owner is unknown"
    if uid == 0:
        return None
    try:
        account: pwd.struct_passwd | None = pwd.getpwuid(uid)
    except KeyError:
        account = None
    gid = request.owner_gid if request.owner_gid is not None else (account.pw_gid if account else None)
    if gid is None:
        return f"the primary group of uid {uid} is unknown"
    # Supplementary groups only when the name Slurm gave is this uid's: project groups often
    # grant read access to shared checkpoint directories.
    groups: tuple[int, ...] = ()
    if account is not None and request.owner_name and account.pw_name == request.owner_name:
        groups = tuple(os.getgrouplist(account.pw_name, gid))
    return DropTo(uid=uid, gid=gid, groups=groups)


async def _read_bounded(stream: asyncio.StreamReader, limit: int, keep_draining: bool) -> tuple[bytes, bool]:
    """Up to `limit` bytes of a stream, and whether there was more. With `keep_draining` the rest
    is read and dropped (so the child never blocks on a full pipe); without, reading stops."""
    chunks: list[bytes] = []
    size = 0
    over = False
    while True:
        chunk = await stream.read(64 * 1024)
        if not chunk:
            return b"".join(chunks), over
        if size + len(chunk) > limit:
            over = True
            if not keep_draining:
                return b"".join(chunks), over
            continue
        chunks.append(chunk)
        size += len(chunk)


def _last_line(diagnostic: bytes) -> str:
    lines = diagnostic.decode("utf-8", "replace").strip().splitlines()
    text = lines[-1] if lines else "no diagnostic"
    return "".join(ch if ch.isprintable() else "?" for ch in text[:200])


class OwnerCheckpointFinder:
    """A `CheckpointFinder` that reads each tree as its job's owner when it can (see module doc)."""

    def __init__(self, *, timeout_s: float | None = None, python: str = sys.executable,
                 goodput_uid: Callable[[], int] = os.geteuid) -> None:
        self._timeout_s = timeout_s
        self._python = python
        self._goodput_uid = goodput_uid

    async def find(self, request: FinderRequest) -> Finding:
        reason = in_process_reason(self._goodput_uid(), request.owner_uid)
        if reason is not None:
            return await InProcessFinder(read_as=reason).find(request)
        drop_to = identity_of(request)
        read_as = f"as {owner_label(request)} in a child process"
        if isinstance(drop_to, str):
            return self._failed(f"checkpoint discovery not run: {drop_to}", read_as)
        return await self._run_child(ChildRequest(request=request, drop_to=drop_to), read_as)

    def _failed(self, explanation: str, read_as: str) -> Finding:
        return Finding(choice=ResumeChoice(checkpoint=None, explanation=explanation), mode=ReadMode.AS_OWNER,
                       read_as=read_as)

    async def _run_child(self, child_request: ChildRequest, read_as: str) -> Finding:
        request = child_request.request
        try:
            child = await asyncio.create_subprocess_exec(
                self._python, "-I", "-m", "goodput.checkpoints.reader",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                cwd="/", env=CHILD_ENV, start_new_session=True)
        except OSError as error:
            return self._failed(f"checkpoint discovery could not start: {error.strerror or error}", read_as)
        timeout = self._timeout_s if self._timeout_s is not None else request.limits.max_seconds + GRACE_S
        try:
            report, over, diagnostic = await asyncio.wait_for(self._exchange(child, child_request), timeout)
        except TimeoutError:
            return self._failed(f"checkpoint discovery timed out after {timeout:g} s; resuming without "
                                "a checkpoint it could vouch for", read_as)
        finally:
            await self._reap(child)
        if over:
            return self._failed(f"checkpoint discovery printed more than {MAX_REPORT_BYTES} bytes; discarded",
                                read_as)
        if child.returncode != 0:
            return self._failed(f"checkpoint discovery failed (exit status {child.returncode}): "
                                f"{_last_line(diagnostic)}", read_as)
        return self._validated(report, request, read_as)

    async def _exchange(self, child: asyncio.subprocess.Process,
                        child_request: ChildRequest) -> tuple[bytes, bool, bytes]:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        # stderr is drained beside stdout so a chatty child never blocks on a full pipe.
        diagnostics = asyncio.create_task(_read_bounded(child.stderr, MAX_DIAGNOSTIC_BYTES, keep_draining=True))
        try:
            child.stdin.write(child_request.model_dump_json().encode())
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # died early: its status says why
                await child.stdin.drain()
                child.stdin.close()
            report, over = await _read_bounded(child.stdout, MAX_REPORT_BYTES, keep_draining=False)
            if over:
                self._kill(child)
            diagnostic, _ = await diagnostics
        finally:
            diagnostics.cancel()
        await child.wait()
        return report, over, diagnostic

    @staticmethod
    def _kill(child: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # its own session: pgid == pid

    async def _reap(self, child: asyncio.subprocess.Process) -> None:
        if child.returncode is None:
            self._kill(child)
            await child.wait()

    def _validated(self, report_json: bytes, request: FinderRequest, read_as: str) -> Finding:
        try:
            report = ChildReport.model_validate_json(report_json)
        except ValidationError as error:
            return self._failed(f"checkpoint discovery returned an invalid report ({error.error_count()} "
                                "error(s)); discarded", read_as)
        chosen = report.choice.checkpoint
        if report.discovery.root != request.config.root or (
                chosen is not None and not within_root(chosen.path, request.config.root)):
            return self._failed("checkpoint discovery reported a checkpoint outside the configured root; "
                                "discarded", read_as)
        return Finding(discovery=report.discovery, choice=report.choice, mode=ReadMode.AS_OWNER, read_as=read_as)


def default_finder() -> CheckpointFinder:
    return OwnerCheckpointFinder()
