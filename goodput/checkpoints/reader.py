"""`python -m goodput.checkpoints.reader`: checkpoint discovery in a child process, as the job's owner.

The parent (activities.adapters.checkpoints) starts this module as root, writes one
`ChildRequest` as JSON on stdin and reads one `ChildReport` as JSON from stdout, validated with
pydantic on the way back (no pickle). Before touching the tree the child lowers its resource
limits (address space, CPU seconds, open files, no core dumps; hard limits, so they stay low),
finishes every import and warms the serialiser, then drops to the owner: supplementary groups,
then gid, then uid (real, effective and saved), and checks that root cannot be regained. Dropping
here rather than before exec means the interpreter and goodput may live where the owner cannot
read, and the process stays non-dumpable after the switch, so the owner cannot ptrace it into
lying. The parent adds a wall-clock timeout and kills it after that. Exit status 0 means a report
was printed; anything else is reported by the parent from stderr's last line.
"""

from __future__ import annotations

import os
import resource
import sys

from pydantic import Field

from goodput.checkpoints.finder import FinderRequest
from goodput.checkpoints.generic import compile_glob, compile_step_regex
from goodput.checkpoints.localfs import LocalFileSystem
from goodput.checkpoints.metadata import parse_json
from goodput.checkpoints.model import Discovery, ResumeChoice
from goodput.checkpoints.resume import find_resume_point
from goodput.models import Frozen

MAX_REQUEST_BYTES = 1024 * 1024
ADDRESS_SPACE_BYTES = 4 * 1024**3
OPEN_FILES = 256
EXIT_CANNOT_DROP = 3


class DropTo(Frozen):
    """The account the child becomes before it reads anything."""

    uid: int = Field(ge=1, le=2**32 - 1)
    gid: int = Field(ge=0, le=2**32 - 1)
    groups: tuple[int, ...] = Field(default=(), max_length=65536)


class ChildRequest(Frozen):
    request: FinderRequest
    # None: read as the user the child was started as (a root-owned job is read as root).
    drop_to: DropTo | None = None


class ChildReport(Frozen):
    """What the child prints: the discovery and the resume choice (the parent adds the read mode)."""

    discovery: Discovery
    choice: ResumeChoice


class DropError(RuntimeError):
    """The child could not become the owner, or could become root again afterwards."""


def _lower_limits(cpu_seconds: int) -> None:
    for limit, value in ((resource.RLIMIT_AS, ADDRESS_SPACE_BYTES), (resource.RLIMIT_CPU, cpu_seconds),
                         (resource.RLIMIT_NOFILE, OPEN_FILES), (resource.RLIMIT_CORE, 0)):
        _soft, hard = resource.getrlimit(limit)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (capped, capped))


def drop_privileges(to: DropTo) -> None:
    """Become `to` for good: groups first (needs root), then gid, then uid; then prove it."""
    try:
        os.setgroups(list(to.groups))
        os.setresgid(to.gid, to.gid, to.gid)
        os.setresuid(to.uid, to.uid, to.uid)
    except OSError as error:
        raise DropError(f"cannot switch to uid {to.uid}, gid {to.gid}: {error.strerror}") from None
    if os.getresuid() != (to.uid,) * 3 or os.getresgid() != (to.gid,) * 3:
        raise DropError(f"still {os.getresuid()}/{os.getresgid()} after switching to uid {to.uid}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise DropError(f"could become root again after switching to uid {to.uid}")


def _warm_up(request: FinderRequest) -> None:
    """Everything discovery and the report use, loaded while the interpreter's files are still
    readable (after the drop, a lazy import from a root-only installation would fail)."""
    parse_json('{"global_step": [1, 2.5, "x", null, true]}')
    compile_step_regex(r"(\d+)")
    compile_glob("ckpt_[0-9]*")
    choice = ResumeChoice(checkpoint=None, explanation="warm-up")
    ChildReport(discovery=Discovery(root=request.config.root, layout=None), choice=choice).model_dump_json()


def run(data: bytes) -> ChildReport:
    child = ChildRequest.model_validate_json(data)
    request = child.request
    _lower_limits(int(request.limits.max_seconds) + 5)
    _warm_up(request)
    if child.drop_to is not None:
        drop_privileges(child.drop_to)
    found, choice = find_resume_point(LocalFileSystem(limits=request.limits), request.config, request.now)
    return ChildReport(discovery=found, choice=choice)


def main() -> int:
    data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    if len(data) > MAX_REQUEST_BYTES:
        print(f"request over {MAX_REQUEST_BYTES} bytes", file=sys.stderr)
        return 2
    try:
        report = run(data)
    except DropError as error:
        print(f"cannot read as the job's owner: {error}", file=sys.stderr)
        return EXIT_CANNOT_DROP
    sys.stdout.write(report.model_dump_json())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
