"""`goodput worker` started before its Temporal server (a unit or a pod started beside it) waits for
it and then serves, instead of exiting on the first refusal; a server that never comes still ends
the worker, with one line that says what it waited for."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import free_port
from workers import devserver

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def start_worker(address: str, tmp_path: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from workers.main import main; main()", "--temporal", address, "worker",
         "--task-queue", "waits"],
        env={**os.environ, "GOODPUT_DATA_DIR": str(tmp_path / "data"), "GOODPUT_CONFIG": str(tmp_path / "none.toml"),
             **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def read_until(proc: subprocess.Popen[bytes], wanted: str, timeout_s: float) -> str:
    """What the process printed until `wanted` appears, it exits, or `timeout_s` passes."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    seen, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline and wanted.encode() not in seen:
        exited = proc.poll() is not None
        try:
            while chunk := os.read(fd, 65536):
                seen += chunk
        except BlockingIOError:
            pass
        if exited:
            break
        time.sleep(0.1)
    return seen.decode(errors="replace")


@pytest.mark.timeout(120)
def test_a_worker_started_before_its_server_waits_for_it_and_then_serves(tmp_path: Path) -> None:
    port = free_port()
    worker = start_worker(f"127.0.0.1:{port}", tmp_path)
    server: subprocess.Popen[bytes] | None = None
    try:
        said = read_until(worker, "waiting for Temporal", timeout_s=30)
        assert f"waiting for Temporal at 127.0.0.1:{port} (Connection refused)…" in said, said
        assert worker.poll() is None, said
        server = devserver.start(port=port, ui_port=None, db_file=None, log_file=tmp_path / "temporal.log")
        said += read_until(worker, "goodput worker on", timeout_s=60)
        assert f"goodput worker on 127.0.0.1:{port} queue waits" in said, said
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        assert worker.stdout is not None
        worker.stdout.close()
        if server is not None:
            devserver.stop(server)


@pytest.mark.timeout(120)
def test_a_server_that_never_comes_ends_the_worker_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    worker = start_worker(f"127.0.0.1:{port}", tmp_path, GOODPUT_TEMPORAL_READY_TIMEOUT_S="3")
    said = read_until(worker, "not ready within", timeout_s=60)
    worker.wait(timeout=20)
    assert worker.stdout is not None
    worker.stdout.close()
    assert worker.returncode == 3, said
    assert f"Temporal at 127.0.0.1:{port} was not ready within 3 s: Connection refused" in said, said
    assert "Traceback" not in said
