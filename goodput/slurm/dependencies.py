"""Job chains: which queued jobs wait on a job, and their dependency pointed at its replacement.

Training runs are chains (`--dependency=afterok:…`, `afterany`, `singleton`). A resubmitted copy
has a new id, so its successors would wait on the old one forever (afterok on a cancelled job is
never satisfied) or start at once (afterany). goodput re-points them to the copy, and when it
stops a job for good it holds the successors that would otherwise run blindly.

The dependency text is the owner's (`sbatch --dependency`), echoed by Slurm with state notes
(`afterok:12(unfulfilled)`); it is parsed against Slurm's grammar, and what goodput writes back
is rebuilt from the parsed form, never spliced from the input. Only jobs of the original's owner
are touched: another user's job that chose to wait on it is theirs to fix. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from goodput.models import Frozen
from goodput.scheduler import JobInfo, JobState

MAX_DEPENDENCY_CHARS = 1024
TYPES = frozenset({"after", "afterany", "afterburstbuffer", "aftercorr", "afternotok", "afterok"})
# One predecessor: a job id, an array task or every task, an optional +minutes (after only), and
# the state note Slurm appends when it prints the dependency.
_TARGET = re.compile(r"(?P<id>\d{1,12}(?:_(?:\d{1,9}|\*))?)(?P<delay>\+\d{1,6})?(?:\((?P<note>[a-z]{1,20})\))?")


class DependencyError(ValueError):
    """A dependency text outside Slurm's grammar: left alone, and said so."""


class Condition(Frozen):
    kind: str
    targets: tuple[tuple[str, str], ...] = ()  # (job id, "+delay" or "")


class Dependency(Frozen):
    conditions: tuple[Condition, ...]
    any_of: bool = False  # `?` (any condition) instead of `,` (all)

    def names(self, job_id: str) -> bool:
        """Whether it waits on `job_id` itself (or on any task of it, as an array)."""
        return any(t == job_id or t.startswith(f"{job_id}_") for c in self.conditions for t, _ in c.targets)

    def render(self) -> str:
        parts = []
        for c in self.conditions:
            parts.append(c.kind if not c.targets else f"{c.kind}:" + ":".join(t + d for t, d in c.targets))
        return ("?" if self.any_of else ",").join(parts)


def parse(text: str) -> Dependency | None:
    """The dependency a job waits on; None when it has none (empty or `(null)`)."""
    text = text.strip()
    if text in ("", "(null)"):
        return None
    if len(text) > MAX_DEPENDENCY_CHARS or not text.isascii():
        raise DependencyError(f"dependency of {len(text)} characters is not Slurm's")
    if "," in text and "?" in text:
        raise DependencyError("a dependency mixes ',' and '?'")
    any_of = "?" in text
    conditions = []
    for part in text.split("?" if any_of else ","):
        kind, _, rest = part.partition(":")
        if kind == "singleton" and not rest:
            conditions.append(Condition(kind=kind))
            continue
        if kind not in TYPES or not rest:
            raise DependencyError(f"unknown dependency {part[:40]!r}")
        targets = []
        for item in rest.split(":"):
            match = _TARGET.fullmatch(item)
            if match is None or (match["delay"] and kind != "after"):
                raise DependencyError(f"bad job in dependency {part[:40]!r}")
            targets.append((match["id"], match["delay"] or ""))
        conditions.append(Condition(kind=kind, targets=tuple(targets)))
    return Dependency(conditions=tuple(conditions), any_of=any_of)


def repointed(dependency: Dependency, old: str, new: str) -> Dependency:
    """The same dependency waiting on `new` wherever it waited on `old` (array tasks keep their
    task: `old_3` becomes `new_3`)."""
    def swap(target: str) -> str:
        if target == old:
            return new
        return f"{new}_{target.split('_', 1)[1]}" if target.startswith(f"{old}_") else target

    return dependency.model_copy(update={"conditions": tuple(
        c.model_copy(update={"targets": tuple((swap(t), d) for t, d in c.targets)}) for c in dependency.conditions)})


class ChainUpdate(Frozen):
    job_id: str
    dependency: str  # the new text, rebuilt from the parsed form


class ChainPlan(Frozen):
    updates: tuple[ChainUpdate, ...] = ()
    skipped: tuple[str, ...] = ()  # why a successor was left alone, one line each


def _successors(jobs: Sequence[JobInfo], original: JobInfo) -> tuple[list[tuple[JobInfo, Dependency]], list[str]]:
    found: list[tuple[JobInfo, Dependency]] = []
    skipped: list[str] = []
    for job in jobs:
        if job.job_id == original.job_id or job.state is not JobState.PENDING or not job.dependency:
            continue
        try:
            dependency = parse(job.dependency)
        except DependencyError as err:
            skipped.append(f"job {job.job_id}: {err}")
            continue
        if dependency is None or not dependency.names(original.job_id):
            continue
        if original.user_id is None or job.user_id != original.user_id:
            skipped.append(f"job {job.job_id} waits on {original.job_id} but is another user's: left alone")
            continue
        found.append((job, dependency))
    return found, skipped


def repoint_plan(jobs: Sequence[JobInfo], original: JobInfo, new_job_id: str) -> ChainPlan:
    """The owner's queued jobs that wait on `original`, each with its dependency on the copy."""
    found, skipped = _successors(jobs, original)
    return ChainPlan(updates=tuple(ChainUpdate(job_id=job.job_id, dependency=repointed(
        dependency, original.job_id, new_job_id).render()) for job, dependency in found), skipped=tuple(skipped))


def successors_to_hold(jobs: Sequence[JobInfo], stopped: JobInfo) -> ChainPlan:
    """The owner's queued jobs that wait on a job goodput stopped for good: they would only fail
    the same way (or, after `afterany`/`afternotok`, start on a broken run's output)."""
    found, skipped = _successors(jobs, stopped)
    return ChainPlan(updates=tuple(ChainUpdate(job_id=job.job_id, dependency=dependency.render())
                                   for job, dependency in found if not job.held), skipped=tuple(skipped))
