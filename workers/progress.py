"""Progress on long operations, shown only when stderr is a terminal.

`checkpoints` over thousands of shards (a running count of entries read), `doctor` waiting on a
Temporal that does not answer (a spinner) and `audit --from-histories` or `lost-work` over many
incidents (a bar) can each take a while; on a terminal the operator sees that something is
happening. Off a terminal (a pipe, a log, a test) nothing extra is written: stdout stays the
command's output and stderr its errors.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from goodput.checkpoints.fs import SMALL_TEXT_LIMIT, Entry, FileSystem

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


@contextlib.contextmanager
def entries_read(what: str) -> Iterator[Callable[[int], None] | None]:
    """A callback counting entries read, shown as a live line; None off a terminal."""
    if not on_terminal():
        yield None
        return
    from rich.console import Console

    count = 0
    with Console(stderr=True).status(what) as status:
        def seen(n: int) -> None:
            nonlocal count
            count += n
            status.update(f"{what}: {count} entries read")

        yield seen


class CountingFileSystem:
    """A FileSystem that reports every entry it lists, stats or reads (for `entries_read`)."""

    def __init__(self, inner: FileSystem, seen: Callable[[int], None]) -> None:
        self._inner, self._seen = inner, seen

    def within(self, root: str) -> FileSystem:
        return CountingFileSystem(self._inner.within(root), self._seen)

    def list_dir(self, path: str) -> list[Entry]:
        entries = self._inner.list_dir(path)
        self._seen(len(entries))
        return entries

    def stat(self, path: str) -> Entry | None:
        self._seen(1)
        return self._inner.stat(path)

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        self._seen(1)
        return self._inner.read_small_text(path, limit)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        self._seen(1)
        return self._inner.read_range(path, offset, length)
