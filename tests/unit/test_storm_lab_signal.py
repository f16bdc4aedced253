"""`storm-lab` killed with SIGTERM or SIGINT takes down what it started (benchmarks/_storm_lab_rig.py).

The benchmark's lab daemons, dev server and workers run in sessions of their own, so a benchmark
that dies of a signal's default action leaves them running. Here a small program shaped like the
benchmark (asyncio.run around a `finally` that stops a child of its own session) is signalled
while it waits; the child must be gone and the program must exit 128 + the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import eventually

pytestmark = pytest.mark.timeout(60)

PROGRAM = textwrap.dedent("""
    import asyncio, subprocess, sys
    from benchmarks import _storm_lab_rig as rig

    async def main() -> None:
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        try:
            print(child.pid, flush=True)
            await asyncio.sleep(300)
        finally:
            child.terminate()
            child.wait()

    try:
        with rig.taken_down_on_signal():
            asyncio.run(main())
    except rig.Terminated as stop:
        raise SystemExit(128 + stop.signum) from None
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent reaps it)
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signalled_benchmark_stops_the_processes_it_started(signum: signal.Signals) -> None:
    child = 0
    with subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}) as proc:
        try:
            assert proc.stdout is not None
            child = int(proc.stdout.readline())
            proc.send_signal(signum)
            assert proc.wait(timeout=30) == 128 + signum
            await eventually(lambda: _alive(child), lambda alive: not alive, timeout=10, interval=0.1,
                             what=f"child {child} gone")
        finally:
            if proc.poll() is None:
                proc.kill()
            if child and _alive(child):
                os.kill(child, signal.SIGKILL)
