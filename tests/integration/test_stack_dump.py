"""The node agent's stack capture on real processes: the job's faulthandler signal reaches only a
rank that registered it, and the dump lands in the job's own stderr (activities.adapters.stack_dump).

`scontrol listpids` is a stand-in script printing Slurm's format for two real Python processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.adapters.stack_dump import StackDumper
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
RANK = """import faulthandler, signal, sys, time
if sys.argv[1] == "registered":
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
def all_reduce_wait():
    while True:
        time.sleep(0.05)
print("ready", flush=True)
all_reduce_wait()
"""


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Path]]]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    procs = {}
    for kind in ("registered", "plain"):
        err = tmp_path / f"{kind}.err"
        with err.open("wb") as stderr:
            proc = subprocess.Popen([sys.executable, str(script), kind], stdout=subprocess.PIPE, stderr=stderr)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        procs[kind] = (proc, err)
    yield procs
    for proc, _ in procs.values():
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def fake_scontrol(tmp_path: Path, job: str, *pids: int, comment: str = "goodput:opt-in goodput:stack-signal=USR1"
                  ) -> Path:
    """`scontrol listpids` and `squeue -o %k` (the job's comment) as Slurm prints them."""
    rows = "".join(f"{pid} {job} 0 {i} {i}\\n" for i, pid in enumerate(pids))
    path = tmp_path / "scontrol"
    path.write_text(f'#!/bin/sh\n[ "$1 $2" = "listpids {job}" ] || exit 1\n'
                    f'printf "PID JOBID STEPID LOCALID GLOBALID\\n{rows}"\n')
    path.chmod(0o755)
    squeue = tmp_path / "squeue"
    squeue.write_text(f'#!/bin/sh\n[ "$*" = "-h -j {job} -o %k" ] || exit 1\necho "{comment}"\n')
    squeue.chmod(0o755)
    return path


def dumper(scontrol: Path, **kwargs: Any) -> StackDumper:
    return StackDumper(scontrol=str(scontrol), squeue=str(scontrol.with_name("squeue")), **kwargs)


def test_the_signal_reaches_only_a_rank_that_catches_it(tmp_path: Path, ranks: dict) -> None:
    (registered, registered_err), (plain, _) = ranks["registered"], ranks["plain"]
    scontrol = fake_scontrol(tmp_path, "77", registered.pid, plain.pid)
    report = dumper(scontrol, py_spy=None).capture("77")
    assert report.signalled == (registered.pid,)
    assert [s.pid for s in report.skipped] == [plain.pid]
    dump = wait_until(lambda: registered_err.read_text(), lambda t: "all_reduce_wait" in t, what="the dump")
    assert "most recent call first" in dump
    assert plain.poll() is None and registered.poll() is None  # nothing was killed


def test_no_signal_for_a_job_that_did_not_ask_for_one(tmp_path: Path, ranks: dict) -> None:
    # Catching SIGUSR1 is not asking for a dump (Lightning catches it to checkpoint and requeue).
    registered, registered_err = ranks["registered"]
    scontrol = fake_scontrol(tmp_path, "77", registered.pid, comment="goodput:opt-in")
    report = dumper(scontrol, py_spy=None).capture("77")
    assert report.signalled == () and "goodput:stack-signal" in report.skipped[0].reason
    assert registered_err.read_text() == ""


def test_another_jobs_listing_is_not_acted_on(tmp_path: Path, ranks: dict) -> None:
    registered, registered_err = ranks["registered"]
    scontrol = fake_scontrol(tmp_path, "78", registered.pid)
    report = dumper(scontrol, py_spy=None).capture("77")
    assert report.signalled == () and report.error
    assert registered_err.read_text() == ""


def test_py_spy_output_is_bounded_and_changes_nothing(tmp_path: Path, ranks: dict) -> None:
    registered, registered_err = ranks["registered"]
    spy = tmp_path / "py-spy"
    # A stand-in: prints far more than the bound, as a hostile or broken tool might.
    spy.write_text('#!/bin/sh\n[ "$1 $2" = "dump --pid" ] || exit 1\n'
                   'echo "Thread $3 (idle): MainThread"; yes "    all_reduce_wait (rank.py:5)" | head -c 1000000\n')
    spy.chmod(0o755)
    scontrol = fake_scontrol(tmp_path, "77", registered.pid)
    report = dumper(scontrol, py_spy=str(spy), max_dump_bytes=4096).capture("77")
    assert report.signalled == ()
    (text,) = report.dumps.values()
    assert text.startswith(f"Thread {registered.pid} (idle)") and len(text.encode()) <= 4096
    assert registered_err.read_text() == "" and os.kill(registered.pid, 0) is None


def test_a_scontrol_that_fails_is_an_error_in_the_report(tmp_path: Path) -> None:
    report = dumper(tmp_path / "missing", py_spy=None).capture("77")
    assert report.error and report.signalled == () and report.dumps == {}


def test_goodput_stacks_on_the_node(tmp_path: Path, ranks: dict) -> None:
    (registered, registered_err), (plain, _) = ranks["registered"], ranks["plain"]
    fake_scontrol(tmp_path, "77", registered.pid, plain.pid)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "GOODPUT_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, "-m", "workers.main", "stacks", "--job", "77"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"pid {registered.pid}: SIGUSR1 sent" in done.stdout
    assert f"pid {plain.pid}: skipped" in done.stdout
    wait_until(lambda: registered_err.read_text(), lambda t: "all_reduce_wait" in t, what="the dump")
    refused = subprocess.run([sys.executable, "-m", "workers.main", "stacks", "--job", "77; reboot"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0 and "SIGUSR1" not in refused.stdout


def test_goodput_stacks_names_the_node_where_several_slurmd_share_the_host(tmp_path: Path, ranks: dict) -> None:
    (registered, _), (plain, _) = ranks["registered"], ranks["plain"]
    fake_scontrol(tmp_path, "77", registered.pid, plain.pid)
    scontrol = tmp_path / "scontrol"  # this host's slurmd for node2 answers only when asked by name
    scontrol.write_text(scontrol.read_text().replace('[ "$1 $2" = "listpids 77" ]', '[ "$*" = "listpids 77 node2" ]'))
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "GOODPUT_CONFIG": str(tmp_path / "none.toml")}

    def stacks(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "workers.main", "stacks", "--job", "77", *extra], env=env,
                              capture_output=True, text=True, timeout=60, check=False)

    named = stacks("--node", "node2")
    assert named.returncode == 0 and f"pid {registered.pid}: SIGUSR1 sent" in named.stdout, named.stderr
    assert stacks().returncode != 0  # unnamed, scontrol asks the host's (other) slurmd
    hostile = stacks("--node", "node2 --all")
    assert hostile.returncode != 0 and "SIGUSR1" not in hostile.stdout


def test_a_py_spy_that_hangs_is_given_up_on(tmp_path: Path, ranks: dict) -> None:
    registered, _ = ranks["registered"]
    spy = tmp_path / "py-spy"
    spy.write_text("#!/bin/sh\nexec sleep 600\n")  # stuck, as on a process in uninterruptible sleep
    spy.chmod(0o755)
    scontrol = fake_scontrol(tmp_path, "77", registered.pid)
    report = dumper(scontrol, py_spy=str(spy), timeout_s=1).capture("77")
    assert report.dumps == {} and [(s.pid, s.reason) for s in report.skipped] == [(registered.pid, "py-spy timed out")]
