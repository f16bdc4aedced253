"""`goodput up` and its embedded Temporal dev server live and die together.

The dev server runs in its own session, so without help it would outlive a `goodput up` killed
with SIGKILL (or by a closed terminal, or the OOM killer) and the next `goodput up` would fail with
its port in use. These tests kill goodput the hard way and check the server goes with it, that a
server an earlier goodput left behind is recognised and stopped, and that nothing else holding the
port is ever touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_cli import start_up, stop_up
from tests.helpers import free_port
from workers import devserver


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def up_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    yield {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
           "GOODPUT_TEMPORAL_UI_PORT": str(free_port()), "GOODPUT_DATA_DIR": str(tmp_path / "data"),
           "GOODPUT_CONFIG": str(tmp_path / "none.toml"), "GOODPUT_CONSOLE__PORT": str(free_port())}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_killed_up_takes_its_temporal_server_with_it(up_env: dict[str, str]) -> None:
    proc = start_up(up_env)
    pid_file = Path(up_env["GOODPUT_DATA_DIR"]) / "temporal-dev.pid"
    server = int(pid_file.read_text())
    try:
        assert not gone(server)
        proc.kill()  # SIGKILL: goodput cleans nothing up
        proc.wait(timeout=10)
        assert wait_gone(server), "the dev server outlived the goodput that started it"
    finally:
        if proc.stdout:
            proc.stdout.close()
        if not gone(server):
            os.kill(server, 9)
    again = start_up(up_env)  # the port is free again
    stop_up(again)


def start_dev_server_by_hand(port: int, data: Path) -> subprocess.Popen[bytes]:
    """A dev server as an older goodput (without the parent-death signal) would have left it."""
    data.mkdir(parents=True, exist_ok=True)
    cmd = [devserver.temporal_binary(), "server", "start-dev", "--port", str(port),
           *devserver.dev_server_args(port=port, ui_port=None, db_file=data / "temporal.db")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    (data / "temporal-dev.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 30
    while not devserver.port_open("127.0.0.1", port):
        assert time.monotonic() < deadline and proc.poll() is None, "hand-started dev server did not listen"
        time.sleep(0.1)
    return proc


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_server_left_by_an_earlier_goodput_is_stopped_and_replaced(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "data"
    leftover = start_dev_server_by_hand(port, data)
    try:
        server = devserver.start(port=port, ui_port=None, db_file=data / "temporal.db",
                                 log_file=data / "temporal.log")
        try:
            assert leftover.wait(timeout=10) is not None  # stopped, and by SIGTERM: it shut down cleanly
            assert server.poll() is None and devserver.port_open("127.0.0.1", port)
            assert int((data / "temporal-dev.pid").read_text()) == server.pid
        finally:
            devserver.stop(server)
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()


def test_a_port_held_by_anything_else_is_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    bystander = subprocess.Popen(["sleep", "60"])
    (data / "temporal-dev.pid").write_text(f"{bystander.pid}\n")  # a stale file naming another process
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            with pytest.raises(devserver.DevServerError, match="already in use"):
                devserver.start(port=port, ui_port=None, db_file=data / "temporal.db", log_file=data / "temporal.log")
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_up_within_seconds_while_browsers_hold_live_streams(up_env: dict[str, str]) -> None:
    printed: list[str] = []
    proc = start_up(up_env, printed)
    console = f"http://127.0.0.1:{up_env['GOODPUT_CONSOLE__PORT']}"
    try:
        # The one-time link `goodput up` printed logs a browser in, once.
        links = [word for line in printed for word in line.split() if "/login/once?token=" in word]
        assert len(links) == 1 and links[0].startswith(console), printed
        with httpx.Client(timeout=30) as browser:
            first = browser.get(links[0])
            assert first.status_code == 303 and "goodput_session" in first.cookies
            assert httpx.get(links[0], timeout=30).status_code == 401
            cookie = first.cookies["goodput_session"]
        # Three tabs, each holding the incident list's live stream open.
        with contextlib.ExitStack() as held:
            tab = held.enter_context(httpx.Client(base_url=console, timeout=60,
                                                  cookies={"goodput_session": cookie}))
            streams = [held.enter_context(tab.stream("GET", "/incidents/stream",
                                                     headers={"accept": "text/event-stream"}))
                       for _ in range(3)]
            lines = [stream.iter_lines() for stream in streams]
            for each in lines:
                assert any(line.startswith("event: incidents") for line in each)  # stops at the first
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            # A liveness bound: before the fix `goodput up` waited on the open streams for ever.
            code = proc.wait(timeout=90)
            took = time.monotonic() - started
            rests = [list(each) for each in lines]  # each ends: the server closed it, not the client
        print(f"goodput up stopped {took:.1f} s after SIGINT with 3 streams open")
        assert code == 0
        assert all("event: closing" in rest for rest in rests), rests
        # The bound is 5 s; a loaded 2-core CI machine gets slack (the time is printed above).
        assert took < 15, f"goodput up took {took:.1f} s to stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
