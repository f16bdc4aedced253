"""The job layouts goodput's Slurm prolog reports, kept as small JSON files under the data dir.

`<root>/<cluster>/<job id>/<attempt>/<node>.json`, one file per node of a job attempt (Slurm's
restart count: a requeued job may run on other nodes), written by the push server and read by
the `attribute` activity (the `LayoutSource` seam). Writes are atomic (a temporary file renamed
over the old one) so a reader in another process never sees half a record; they are not
fsynced: a layout is a hint for attribution, and losing the newest ones in a crash costs only
that hint. The store is bounded: at most `max_jobs` jobs per cluster and `max_nodes_per_job`
records per attempt; jobs older than `max_age` and, past the cap, the oldest jobs are removed.
Records are pydantic JSON, never pickles, and every path part is a validated identifier.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from goodput.diagnose.layout import JobLayout, NodeLayout
from goodput.diagnose.layout import job_layout as assemble
from goodput.identifiers import InvalidIdentifierError, validate_cluster, validate_job_id, validate_node_name

log = logging.getLogger("goodput.layouts")

MAX_RECORD_BYTES = 256 << 10


class LayoutStoreFullError(Exception):
    """A job attempt already has as many node records as the store keeps for one."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LayoutStore:
    def __init__(self, root: Path, *, max_jobs: int = 10_000, max_nodes_per_job: int = 4096,
                 max_age: timedelta = timedelta(days=14), prune_every: timedelta = timedelta(minutes=1),
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self.root = root
        self.max_jobs = max_jobs
        self.max_nodes_per_job = max_nodes_per_job
        self.max_age = max_age
        self._prune_every = prune_every
        self._clock = clock
        self._lock = threading.Lock()  # one writer per process: the epilog's update reads, then writes
        self._pruned_at: dict[str, datetime] = {}

    # -- writing (the push server) ----------------------------------------------------------

    def put(self, cluster: str, layout: NodeLayout) -> None:
        """A prolog's record: replaces what the node reported before for this job attempt."""
        with self._lock:
            self._write(cluster, layout)

    def end(self, cluster: str, layout: NodeLayout) -> None:
        """An epilog's record: the node's prolog record gains when the job ended there and the
        epilog's node check (or, with no prolog record, the epilog's record stands alone)."""
        with self._lock:
            known = self._read(self._path(cluster, layout.job_id, layout.attempt, layout.node))
            base = known if known is not None else layout
            self._write(cluster, base.model_copy(update={"ended_at": layout.recorded_at, "end_check": layout.check}))

    def _path(self, cluster: str, job_id: str, attempt: int, node: str) -> Path:
        return self._attempt_dir(cluster, job_id, attempt) / f"{validate_node_name(node)}.json"

    def _attempt_dir(self, cluster: str, job_id: str, attempt: int) -> Path:
        if attempt < 0:
            raise InvalidIdentifierError(f"attempt {attempt} is negative")
        return self.root / validate_cluster(cluster) / validate_job_id(job_id) / str(attempt)

    def _write(self, cluster: str, layout: NodeLayout) -> None:
        path = self._path(cluster, layout.job_id, layout.attempt, layout.node)
        job_dir = path.parent.parent
        new_job = not job_dir.is_dir()
        if not path.exists() and path.parent.is_dir() and self._count(path.parent) >= self.max_nodes_per_job:
            raise LayoutStoreFullError(f"job {layout.job_id} attempt {layout.attempt} already has "
                                       f"{self.max_nodes_per_job} node records")
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for directory in (job_dir.parent, job_dir, path.parent):  # each level private, not only the last
            directory.mkdir(mode=0o700, exist_ok=True)
        data = layout.model_dump_json().encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.utime(job_dir)  # the job's age counts from its newest record
        self._maybe_prune(job_dir.parent, force=new_job)

    @staticmethod
    def _count(directory: Path) -> int:
        with os.scandir(directory) as entries:
            return sum(1 for e in entries if e.name.endswith(".json") and not e.name.startswith("."))

    # -- pruning --------------------------------------------------------------------------

    def _maybe_prune(self, cluster_dir: Path, *, force: bool) -> None:
        now = self._clock()
        last = self._pruned_at.get(cluster_dir.name)
        if not force and last is not None and now - last < self._prune_every:
            return
        self._pruned_at[cluster_dir.name] = now
        self.prune(cluster_dir.name, now=now)

    def prune(self, cluster: str, *, now: datetime | None = None) -> int:
        """Remove jobs older than max_age, then the oldest past max_jobs; returns how many went."""
        cluster_dir = self.root / validate_cluster(cluster)
        now = now or self._clock()
        jobs: list[tuple[float, Path]] = []
        try:
            with os.scandir(cluster_dir) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            jobs.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
        except FileNotFoundError:
            return 0
        jobs.sort()
        cutoff = (now - self.max_age).timestamp()
        doomed = [p for mtime, p in jobs if mtime < cutoff]
        kept = len(jobs) - len(doomed)
        doomed += [p for mtime, p in jobs if mtime >= cutoff][:max(0, kept - self.max_jobs)]
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)
        if doomed:
            log.info("layouts of %s: removed %d old jobs", cluster, len(doomed))
        return len(doomed)

    # -- reading (the attribute activity) -----------------------------------------------------

    def job_layout(self, cluster: str, job_id: str, attempt: int) -> JobLayout | None:
        try:
            directory = self._attempt_dir(cluster, job_id, attempt)
        except InvalidIdentifierError:
            return None
        records: list[NodeLayout] = []
        try:
            with os.scandir(directory) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return None
        for name in names[:self.max_nodes_per_job]:
            record = self._read(directory / name)
            if record is not None:
                records.append(record)
        return assemble(cluster, job_id, attempt, records) if records else None

    @staticmethod
    def _read(path: Path) -> NodeLayout | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as source:
                data = source.read(MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as err:
            log.warning("layout record %s cannot be read, ignored: %s", path, err)
            return None
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError(f"larger than {MAX_RECORD_BYTES} bytes")
            return NodeLayout.model_validate_json(data)
        except (ValueError, ValidationError) as err:
            log.warning("layout record %s is unreadable, ignored: %s", path, str(err)[:200])
            return None


def layout_store_for(data_dir: Path) -> LayoutStore:
    """The store of a deployment: the push server writes it, the workers on the same data dir read it."""
    return LayoutStore(data_dir / "layouts")
