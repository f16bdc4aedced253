"""Which of a hung job's processes the node agent may dump, and how (goodput.detect.stack_capture)."""

from __future__ import annotations

import signal

import pytest

from goodput.detect.stack_capture import (
    MAX_PIDS,
    StackCaptureError,
    catches,
    cgroup_job,
    parse_listpids,
    plan,
    requested_signal,
)

LISTPIDS = """PID      JOBID    STEPID   LOCALID GLOBALID
4242     77       0        0       0
4243     77       0        1       1
4300     77       batch    0       0
4242     77       0        0       0
"""
USR1 = 1 << (signal.SIGUSR1 - 1)


def status(caught: int) -> str:
    return f"Name:\tpython\nState:\tS (sleeping)\nSigBlk:\t0000000000000000\nSigCgt:\t{caught:016x}\n"


def test_listpids_gives_the_jobs_pids_once_each() -> None:
    assert parse_listpids(LISTPIDS, "77") == (4242, 4243, 4300)


@pytest.mark.parametrize("text", [
    "PID JOBID STEPID LOCALID GLOBALID\n4242 78 0 0 0\n",      # another job's row
    "PID JOBID STEPID LOCALID GLOBALID\n1 77 0 0 0\n",         # init is never a job's
    "PID JOBID STEPID LOCALID GLOBALID\n-5 77 0 0 0\n",
    "PID JOBID STEPID LOCALID GLOBALID\n99999999999999999999 77 0 0 0\n",
    "PID JOBID STEPID LOCALID GLOBALID\n4242x 77 0 0 0\n",
])
def test_rows_that_are_not_this_jobs_processes_are_dropped(text: str) -> None:
    assert parse_listpids(text, "77") == ()


def test_a_flood_of_pids_is_an_error_not_a_signal_storm() -> None:
    rows = "".join(f"{1000 + i} 77 0 {i} {i}\n" for i in range(MAX_PIDS + 1))
    with pytest.raises(StackCaptureError, match="more than"):
        parse_listpids("PID JOBID STEPID LOCALID GLOBALID\n" + rows, "77")


def test_only_a_process_that_catches_the_signal_is_signalled() -> None:
    # SIGUSR1's default action ends the process: a job that did not register faulthandler for it
    # would be killed by the very dump meant to diagnose it.
    assert catches(status(USR1 | 0x4000), signal.SIGUSR1)
    assert not catches(status(0x4000), signal.SIGUSR1)
    assert not catches("Name:\tpython\n", signal.SIGUSR1)
    assert not catches("SigCgt:\tzz\n", signal.SIGUSR1)


@pytest.mark.parametrize(("text", "job"), [
    ("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_1\n", "77"),
    ("12:memory:/slurm/uid_1000/job_77/step_batch/task_0\n0::/\n", "77"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
])
def test_the_cgroup_says_whose_process_it_is(text: str, job: str | None) -> None:
    assert cgroup_job(text) == job


def test_py_spy_when_installed_else_the_signal_else_nothing() -> None:
    pids = (10, 11, 12)
    caught = {10: True, 11: False, 12: True}
    cgroups = {10: "77", 11: "77", 12: "78"}  # 12 was reused by another job's process meanwhile
    with_spy = plan(pids, "77", py_spy=True, catching=caught, cgroups=cgroups)
    assert [(c.pid, c.method) for c in with_spy] == [(10, "py-spy"), (11, "py-spy"), (12, "skip")]
    without = plan(pids, "77", py_spy=False, catching=caught, cgroups=cgroups)
    assert [(c.pid, c.method) for c in without] == [(10, "signal"), (11, "skip"), (12, "skip")]
    assert "does not catch" in without[1].reason and "job 78" in without[2].reason
    # A node without Slurm cgroups: Slurm's own list is the only word on whose process it is.
    assert [c.method for c in plan((10,), "77", py_spy=False, catching={10: True}, cgroups={10: None})] == ["signal"]


@pytest.mark.parametrize(("comment", "signum"), [
    ("goodput:opt-in goodput:stack-signal=USR1", signal.SIGUSR1),
    ("goodput:stack-signal=SIGUSR2,goodput:opt-in", signal.SIGUSR2),
    ("goodput:opt-in", None),
    ("goodput:stack-signal=KILL", None),           # only the two user signals, never one that ends it
    ("goodput:stack-signal=USR1x", None),
    ("xgoodput:stack-signal=USR1", None),
])
def test_the_job_names_its_dump_signal_in_its_comment(comment: str, signum: int | None) -> None:
    assert requested_signal(comment) == signum


def test_no_signal_unless_the_job_asked_even_to_a_process_that_catches_it() -> None:
    # Lightning catches SIGUSR1 to checkpoint and requeue: catching is not asking for a dump.
    [step] = plan((10,), "77", py_spy=False, catching={10: True}, cgroups={10: "77"}, signal_asked=False)
    assert step.method == "skip" and "goodput:stack-signal" in step.reason
