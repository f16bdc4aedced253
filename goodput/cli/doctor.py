"""`goodput doctor`'s vocabulary and report: one line per piece a deployment needs, what was found,
and, when it is broken, what to do about it.

A new site's first question is "why does goodput not see my jobs?", and the answer is usually
one missing piece: Temporal unreachable, search attributes never registered, a SLURM_CONF the
service user cannot read, a worker without operator rights, a data directory it cannot write.
The checks themselves touch the world (workers.doctor); this module only says what a result is
and prints them. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TextIO

from goodput.models import Frozen


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # works, but something an operator should know or fix
    FAIL = "fail"  # goodput cannot do its job until this is fixed
    SKIPPED = "skipped"  # not applicable to this deployment, or blocked by an earlier failure


class CheckResult(Frozen):
    name: str
    status: Status
    found: str
    fix: str = ""


def exit_code(results: Sequence[CheckResult]) -> int:
    return 1 if any(r.status is Status.FAIL for r in results) else 0


_MARK = {Status.OK: "ok  ", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIPPED: "skip"}


def render(results: Sequence[CheckResult], out: TextIO) -> None:
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        out.write(f"[{_MARK[r.status]}] {r.name.ljust(width)}  {r.found}\n")
        if r.fix and r.status in (Status.FAIL, Status.WARN):
            out.write(f"       {' ' * width}  fix: {r.fix}\n")
    failed = [r.name for r in results if r.status is Status.FAIL]
    out.write(f"{len(failed)} problem(s): {', '.join(failed)}\n" if failed else "all checks passed\n")
