"""The node agent's stack capture: a hung job's processes, dumped by py-spy or their own faulthandler.

The rules (whose processes, which method, what is skipped and why) are `goodput.detect.stack_capture`;
this is the I/O around them: `scontrol listpids` on the node, `/proc/<pid>/status` and `cgroup`
read just before acting, `py-spy dump` with a timeout and its output cut at a bound, or one signal.
A failure is a line in the report, never an exception out of the agent's loop.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from goodput.detect.stack_capture import (
    MAX_DUMP_BYTES,
    Capture,
    StackCaptureError,
    catches,
    cgroup_job,
    parse_listpids,
    plan,
    requested_signal,
)

MAX_LISTPIDS_BYTES = 256 * 1024
MAX_PROC_FILE_BYTES = 64 * 1024


@dataclass
class StackReport:
    job_id: str
    dumps: dict[int, str] = field(default_factory=dict)   # py-spy's output per pid, bounded
    signalled: tuple[int, ...] = ()                        # their dump goes to the job's stderr
    signal_name: str = ""
    skipped: tuple[Capture, ...] = ()
    error: str = ""


def _proc_text(path: Path) -> str:
    try:
        with path.open("rb") as f:  # procfs: never a FIFO, and read to a bound all the same
            return f.read(MAX_PROC_FILE_BYTES).decode(errors="replace")
    except OSError:
        return ""


def _bounded_run(argv: list[str], limit: int, timeout_s: float) -> tuple[int | None, bytes]:
    """Run argv, keep at most `limit` bytes of its stdout, and never wait past `timeout_s` (a tool
    stuck on a process in uninterruptible sleep must not stall the agent); None: it timed out."""
    deadline = time.monotonic() + timeout_s
    out = bytearray()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                          start_new_session=True) as proc:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as ready:
            ready.register(fd, selectors.EVENT_READ)
            while len(out) < limit:
                left = deadline - time.monotonic()
                if left <= 0 or not ready.select(left):
                    break
                chunk = os.read(fd, min(1 << 16, limit - len(out)))
                if not chunk:
                    break
                out += chunk
        proc.stdout.close()  # a tool still writing gets SIGPIPE instead of filling memory
        try:
            code: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return code, bytes(out)


class StackDumper:
    def __init__(self, *, scontrol: str = "scontrol", squeue: str = "squeue", py_spy: str | None = None,
                 proc: Path = Path("/proc"), timeout_s: float = 10.0, max_dump_bytes: int = MAX_DUMP_BYTES,
                 node: str | None = None) -> None:
        self._scontrol = scontrol
        # The agent names its own node: where several slurmd share a host (Slurm's multiple-slurmd
        # setups, the lab) `scontrol listpids J` alone cannot tell which one to ask.
        self._node = node
        self._squeue = squeue
        self._py_spy = py_spy
        self._proc = proc
        self._timeout_s = timeout_s
        self._max_dump = max_dump_bytes

    def _asked_signal(self, job_id: str) -> int | None:
        """The dump signal the job's comment names (Slurm's record of it); None when none or unreadable."""
        try:
            code, raw = _bounded_run([self._squeue, "-h", "-j", job_id, "-o", "%k"], 8192, self._timeout_s)
        except OSError:
            return None
        return requested_signal(raw.decode(errors="replace")) if code == 0 else None

    def capture(self, job_id: str) -> StackReport:
        """Every process Slurm lists for `job_id` on this node, dumped or skipped with a reason."""
        try:
            argv = [self._scontrol, "listpids", job_id, *([self._node] if self._node else [])]
            code, raw = _bounded_run(argv, MAX_LISTPIDS_BYTES, self._timeout_s)
            if code != 0:
                return StackReport(job_id, error=f"scontrol listpids {job_id} failed (exit {code})")
            pids = parse_listpids(raw.decode(errors="replace"), job_id)
        except (OSError, StackCaptureError) as err:
            return StackReport(job_id, error=f"cannot list job {job_id}'s processes: {err}")
        if not pids:
            return StackReport(job_id, error=f"Slurm lists no process of job {job_id} on this node")
        signum = None if self._py_spy is not None else self._asked_signal(job_id)
        status = {pid: _proc_text(self._proc / str(pid) / "status") for pid in pids}
        cgroups = {pid: cgroup_job(_proc_text(self._proc / str(pid) / "cgroup")) for pid in pids}
        catching = {pid: signum is not None and catches(text, signum) for pid, text in status.items()}
        steps = plan(pids, job_id, py_spy=self._py_spy is not None, catching=catching, cgroups=cgroups,
                     signal_asked=signum is not None)
        report = StackReport(job_id, skipped=tuple(s for s in steps if s.method == "skip"))
        signalled = []
        for step in steps:
            if step.method == "py-spy" and self._py_spy is not None:
                try:
                    code, out = _bounded_run([self._py_spy, "dump", "--pid", str(step.pid)], self._max_dump,
                                             self._timeout_s)
                except OSError as err:
                    code, out = -1, f"{err}".encode()
                if code is None or not out:
                    why = "timed out" if code is None else f"printed nothing (exit {code})"
                    report.skipped += (step.model_copy(update={"method": "skip", "reason": f"py-spy {why}"}),)
                    continue
                report.dumps[step.pid] = out.decode(errors="replace")
            elif step.method == "signal" and signum is not None:
                try:
                    os.kill(step.pid, signum)
                    signalled.append(step.pid)
                except OSError as err:
                    report.skipped += (step.model_copy(update={"method": "skip", "reason": str(err)}),)
        report.signalled = tuple(signalled)
        report.signal_name = signal.Signals(signum).name if signum is not None else ""
        return report
