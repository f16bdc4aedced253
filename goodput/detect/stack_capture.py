"""Which of a hung job's processes the node agent may dump, and how: the rules, without the I/O.

A hung collective leaves every rank but one waiting in it; a stack dump of every rank names the
one that is elsewhere (`goodput.diagnose.signatures.stalls` reads py-spy and faulthandler dumps).
The agent captures them on request, and doing that safely is the point of this module:

* **Only the job's processes, as Slurm lists them.** The pids come from `scontrol listpids <job>`
  on the node (slurmstepd's record), never from anything the job prints or writes: a pid a job
  could choose would let it have the agent signal someone else's process. Where the node runs
  Slurm's cgroup plugin, `/proc/<pid>/cgroup` is read again just before acting, so a pid reused
  by another job's process in between is skipped.
* **py-spy when installed** (`py-spy dump --pid`): it reads the process from outside and changes
  nothing in it.
* **Else the job's faulthandler signal, when the job asked for it and only where the process
  catches it.** SIGUSR1's default action ends a process, so signalling a rank that did not call
  `faulthandler.register(signal.SIGUSR1)` would kill the job the dump was meant to diagnose;
  `/proc/<pid>/status` says which signals a process catches (`SigCgt`). Catching is not enough:
  PyTorch Lightning catches SIGUSR1 to checkpoint and requeue the job (`--signal=SIGUSR1@90`), so
  a signal goes only to a job whose comment names it (`goodput:stack-signal=USR1` or `USR2`, the
  job choosing what its own processes receive). The dump then goes to the job's own stderr, where
  the log watcher reads it like any other line.
* **Bounded**: at most `MAX_PIDS` processes per job (a longer list is an error, not a signal
  storm), and each dump is cut at `MAX_DUMP_BYTES` by the adapter that reads it.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Literal

import re2

from goodput.models import Frozen

MAX_PIDS = 1024
MAX_DUMP_BYTES = 256 * 1024
MAX_PID = 4_194_304  # the kernel's PID_MAX_LIMIT
_ROW = re2.compile(r"^\s*(\d{1,7})\s+(\S{1,32})\s+\S{1,32}")
_SLURM_CGROUP = re2.compile(r"/job_(\d{1,12})(?:/|$)")
_SIGNAL_MARKER = re2.compile(r"(?:^|[\s,;])goodput:stack-signal=(?:SIG)?(USR1|USR2)(?:$|[\s,;])")
_SIGNALS = {"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}


class StackCaptureError(ValueError):
    """A job's process list the agent will not act on; the message says why."""


class Capture(Frozen):
    pid: int
    method: Literal["py-spy", "signal", "skip"]
    reason: str = ""


def parse_listpids(text: str, job_id: str) -> tuple[int, ...]:
    """The pids `scontrol listpids <job>` lists for `job_id`, once each, in its order."""
    pids: dict[int, None] = {}
    for line in text.splitlines()[: 4 * MAX_PIDS]:
        row = _ROW.match(line[:256])
        if row is None or row.group(2) != job_id:
            continue  # the header, a blank line, another job's row
        pid = int(row.group(1))
        if 1 < pid <= MAX_PID:
            pids[pid] = None
        if len(pids) > MAX_PIDS:
            raise StackCaptureError(f"job {job_id} lists more than {MAX_PIDS} processes on this node")
    return tuple(pids)


def catches(status: str, signum: int) -> bool:
    """Whether `/proc/<pid>/status` says the process has a handler for `signum` (its SigCgt mask)."""
    for line in status.splitlines()[:128]:
        if line.startswith("SigCgt:"):
            try:
                return bool(int(line[7:].strip()[:16], 16) >> (signum - 1) & 1)
            except ValueError:
                return False
    return False


def cgroup_job(text: str) -> str | None:
    """The Slurm job a process's `/proc/<pid>/cgroup` places it in; None outside Slurm's cgroups."""
    for line in text.splitlines()[:64]:
        found = _SLURM_CGROUP.search(line[:4096])
        if found:
            return str(found.group(1))
    return None


def requested_signal(comment: str) -> int | None:
    """The dump signal a job's comment asks for (`goodput:stack-signal=USR1`); None: none asked."""
    found = _SIGNAL_MARKER.search(comment[:4096])
    return int(_SIGNALS[found.group(1)]) if found else None


def plan(pids: Sequence[int], job_id: str, *, py_spy: bool, catching: Mapping[int, bool],
         cgroups: Mapping[int, str | None], signal_asked: bool = True) -> list[Capture]:
    """How each of the job's processes is dumped, or why it is not; `catching` is about the signal
    the job asked for, and `signal_asked` False sends none whatever the processes catch."""
    steps = []
    for pid in pids[:MAX_PIDS]:
        owner = cgroups.get(pid)
        if owner is not None and owner != job_id:
            steps.append(Capture(pid=pid, method="skip", reason=f"pid {pid} is now job {owner}'s"))
        elif py_spy:
            steps.append(Capture(pid=pid, method="py-spy"))
        elif not signal_asked:
            steps.append(Capture(pid=pid, method="skip", reason="no py-spy here, and the job's comment names no "
                                 "dump signal (goodput:stack-signal=USR1)"))
        elif catching.get(pid, False):
            steps.append(Capture(pid=pid, method="signal"))
        else:
            steps.append(Capture(pid=pid, method="skip",
                                 reason=f"pid {pid} does not catch the dump signal (no faulthandler.register)"))
    return steps
