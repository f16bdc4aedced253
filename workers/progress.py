"""Progress on long operations, shown only when stderr is a terminal.

`checkpoints` over thousands of shards, `doctor` waiting on a Temporal that does not answer and
`audit --from-histories` over many incidents can each take a while; on a terminal the operator
sees that something is happening. Off a terminal (a pipe, a log, a test) nothing extra is
written: stdout stays the command's output and stderr its errors.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def on_terminal() -> bool:
    return sys.stderr.isatty()


@contextlib.contextmanager
def spinner(what: str) -> Iterator[None]:
    """A spinner saying what is being done, while the block runs."""
    if not on_terminal():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(what):
        yield


def counted(items: Iterable[T], total: int, what: str) -> Iterator[T]:
    """`items` with a progress bar of `total` steps."""
    if not on_terminal():
        yield from items
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(what, total=total)
        for item in items:
            yield item
            progress.advance(task)
