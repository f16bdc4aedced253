"""One Slurm command for many incidents that share a fault: requeues, releases and drains
asked for within one short tick go to slurmctld together (issue #29).

A leaf switch that fails takes every job on its nodes with it, and each job's incident asks for
its own requeue a few milliseconds after the others. The CLI backend (and the SSH backend, which
is the same backend over another runner) hands each such command to one `Coalescer` per worker
process; the workflow code does not change. Each caller waits for its share and gets its own
result:

* alone in its tick: the very command it would have run without the coalescer;
* with others: one `scontrol requeuehold 1,2,3`; scontrol acts on every job it can and names
  each one it could not (`Invalid job id specified for job 3`), so the one bad job fails alone;
* a batch whose failure names no job (the controller unreachable, a node list refused whole):
  every item is sent again alone, so each caller gets the error its own command gets.

A batch is sent once a tick (50 ms) passes without a new item, or 500 ms after its first item,
whichever is first: a calm incident's command waits one tick. Bounded: at most `cap` items per
batch; a full batch is sent at once and the next one opens.
Reads go the same way (`read_status`): the status polls of one tick are one `scontrol` process
asking `show job <id>` for each job on its standard input, each a single-job lookup at slurmctld
(goodput.slurm.job_script; a `squeue -j 1,2,3` made slurmctld pack every job of the cluster), and
each caller reads its own record from between two marks no job can forge; the
node reads of one tick are one `scontrol show node -o a,b,c` (`read_node_line`), each caller's
own line taken only from an answer that is exactly one line per node asked.
Each result carries its `Share` (the batch size and the command), which the backend writes into
the action's detail, so the incident's timeline says it was batched.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field

from activities.adapters.slurm_runner import CommandResult, CommandRunner
from goodput.scheduler import JobStatus, TransientSchedulerError
from goodput.slurm import commands
from goodput.slurm.batch import (
    MAX_BATCH,
    job_errors,
    node_line,
    parse_statuses,
    show_nodes_many,
    squeue_scan,
    squeue_status,
)
from goodput.slurm.job_script import job_statuses, new_nonce, show_jobs_argv, show_jobs_script

DEFAULT_TICK_S = 0.05
DEFAULT_MAX_WAIT_S = 0.5  # the most a storm's first requeue waits for its batch-mates
MAX_SHOWN = 160  # characters of the batched command a result's detail quotes


@dataclass(frozen=True)
class Share:
    """An item's part of a command: alone (size 1) or one of `size` in `argv`."""

    size: int
    argv: tuple[str, ...]
    items: tuple[str, ...] = ()  # in the order the command names them

    def note(self) -> str:
        """`` (one of 3 in `scontrol requeuehold 1,2,3`)`` for a detail; empty when alone."""
        if self.size <= 1:
            return ""
        shown = " ".join(self.argv)
        shown = shown if len(shown) <= MAX_SHOWN else shown[:MAX_SHOWN] + "…"
        return f" (one of {self.size} in `{shown}`)"


@dataclass(frozen=True)
class Outcome:
    """This item's own result (as if its command ran alone) and its share."""

    result: CommandResult
    share: Share


@dataclass(frozen=True)
class Kind:
    """How one kind of command is built for one item and for many, and whether scontrol says per
    item which failed (job lists do; a node list fails whole). `stdin` feeds the many-item
    command its script; `answers_each` means its output answers each item apart, so even a
    non-zero exit (one job gone) is every item's to read its own part from."""

    name: str
    single: Callable[[str], Sequence[str]]
    many: Callable[[Sequence[str]], Sequence[str]]
    per_item_errors: bool
    stdin: Callable[[Sequence[str]], bytes] | None = None
    answers_each: bool = False


@dataclass
class _Batch:
    kind: Kind
    waiters: dict[str, asyncio.Future[Outcome]] = field(default_factory=dict)


class Coalescer:
    """Groups same-kind commands within `tick_s` into one; one per worker process (per backend)."""

    def __init__(self, runner: CommandRunner, *, tick_s: float = DEFAULT_TICK_S, cap: int = MAX_BATCH,
                 max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        if not 1 <= cap <= MAX_BATCH or tick_s < 0 or max_wait_s < tick_s:
            raise ValueError(f"cap must be 1..{MAX_BATCH}, 0 <= tick_s <= max_wait_s")
        self._runner = runner
        self._tick_s = tick_s
        self._max_wait_s = max_wait_s
        self._cap = cap
        self._open: dict[tuple[str, ...], _Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, kind: Kind, key: tuple[str, ...], item: str) -> Outcome:
        """Run `kind` for `item`, together with the items of the same `key` in this tick."""
        if self._tick_s == 0 or self._cap == 1:
            return await self._alone(kind, item)
        group = (kind.name, *key)
        batch = self._open.get(group)
        if batch is None:
            batch = self._open[group] = _Batch(kind)
            self._start(self._flush_later(group, batch))
        waiter = batch.waiters.get(item)
        if waiter is None:  # the same item twice in one tick shares one outcome
            waiter = batch.waiters[item] = asyncio.get_running_loop().create_future()
        if len(batch.waiters) >= self._cap and self._open.get(group) is batch:
            del self._open[group]
            self._start(self._flush(batch))
        # shielded: a cancelled caller must not cancel the outcome its batch-mates share
        return await asyncio.shield(waiter)

    def _start(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush_later(self, group: tuple[str, ...], batch: _Batch) -> None:
        # Sent once a tick passes with no new item, or `max_wait_s` after the first: a storm's
        # incidents arrive spread over their own reads, a calm incident waits one tick only.
        loop = asyncio.get_running_loop()
        last_seen, give_up = 0, loop.time() + self._max_wait_s
        while len(batch.waiters) > last_seen and loop.time() < give_up and self._open.get(group) is batch:
            last_seen = len(batch.waiters)
            await asyncio.sleep(min(self._tick_s, max(0.0, give_up - loop.time())))
        if self._open.get(group) is batch:  # not sent already for being full
            del self._open[group]
            await self._flush(batch)

    async def alone(self, kind: Kind, item: str) -> Outcome:
        """`kind` for `item` by itself, now (a caller that could not use its batch's answer)."""
        return await self._alone(kind, item)

    async def _alone(self, kind: Kind, item: str) -> Outcome:
        argv = tuple(kind.single(item))
        return Outcome(await self._runner.run(argv), Share(1, argv))

    async def _flush(self, batch: _Batch) -> None:
        items = list(batch.waiters)
        outcomes: dict[str, Outcome | BaseException]
        try:
            if len(items) == 1:
                outcomes = {items[0]: await self._alone(batch.kind, items[0])}
            else:
                outcomes = await self._together(batch.kind, items)
        except Exception as err:  # every waiter gets the error its command got
            outcomes = dict.fromkeys(items, err)
        except BaseException:  # cancelled (the worker stops): no waiter may wait forever
            for waiter in batch.waiters.values():
                if not waiter.done():
                    waiter.set_exception(TransientSchedulerError("the batched Slurm command was cancelled"))
            raise
        for item, waiter in batch.waiters.items():
            if waiter.done():
                continue
            outcome = outcomes[item]
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)

    async def _together(self, kind: Kind, items: list[str]) -> dict[str, Outcome | BaseException]:
        argv = tuple(kind.many(items))
        share = Share(len(items), argv, tuple(items))
        try:
            result: CommandResult | None = await self._runner.run(
                argv, stdin=kind.stdin(items) if kind.stdin is not None else None)
        except Exception:  # unknown whether it acted: each item asks alone
            result = None
        if result is not None and kind.answers_each:
            return dict.fromkeys(items, Outcome(result, share))
        if result is not None and result.ok:
            return {i: Outcome(CommandResult(argv, 0, result.stdout, ""), share) for i in items}
        errors = job_errors(result.stderr, items) if result is not None and kind.per_item_errors else None
        if result is not None and errors is not None:
            return {i: Outcome(CommandResult(tuple(kind.single(i)), result.returncode, "", f"{errors[i]} for job {i}")
                               if i in errors else CommandResult(argv, 0, "", ""), share) for i in items}
        alone = await asyncio.gather(*(self._alone(kind, i) for i in items), return_exceptions=True)
        return dict(zip(items, alone, strict=True))


# Alone, `squeue -j ID` (one id is looked up by slurmctld, and its fields are none a job writes);
# together, one scontrol reading `show job ID` for each from its standard input. The marks that
# split its answer hold this process's secret (goodput.slurm.job_script).
_NONCE = new_nonce()
STATUS = Kind("status", lambda j: squeue_status([j]), lambda _: show_jobs_argv(), per_item_errors=False,
              stdin=lambda items: show_jobs_script(items, _NONCE), answers_each=True)


@functools.lru_cache(maxsize=2)
def _batch_statuses(stdout: str, items: tuple[str, ...]) -> Mapping[str, JobStatus]:
    """A shared answer read once for all its callers (64 of them read 64 records otherwise)."""
    return job_statuses(stdout, items, _NONCE)


async def read_status(coalescer: Coalescer, job_id: str) -> JobStatus | None:
    """Job `job_id`'s status from this tick's shared read; None when that answer does not say
    (refused, failed, or the job's part not one trusted record): the caller then reads it alone."""
    outcome = await coalescer.run(STATUS, (), job_id)
    if outcome.share.size > 1:
        return _batch_statuses(outcome.result.stdout, outcome.share.items).get(job_id)
    if not outcome.result.ok:
        return None
    statuses = parse_statuses(outcome.result.stdout)
    return None if statuses is None else statuses.get(job_id)


# A node list that names a node Slurm does not know fails whole (22.05), so the nodes are read alone then.
NODE = Kind("node", commands.show_node, show_nodes_many, per_item_errors=False)


async def read_node_line(coalescer: Coalescer, name: str) -> CommandResult:
    """Node `name`'s `scontrol show node -o` answer: its own line of this tick's shared read, else
    (a failed or doubtful batch) its own read alone, which the caller checks as strictly as ever."""
    outcome = await coalescer.run(NODE, (), name)
    if outcome.share.size <= 1 or not outcome.result.ok:
        return outcome.result  # a failed batch was already sent again alone
    line = node_line(outcome.result.stdout, name, outcome.share.argv[-1].split(","))
    if line is not None:
        return CommandResult(outcome.result.argv, 0, line + "\n", "")
    return (await coalescer.alone(NODE, name)).result


# A node's jobs: `squeue --nodelist` loads every job from slurmctld and filters on the client, so
# the node lookups of one tick (a switch's NVSentinel events, a node at a time) cost no more as one
# list of every job's lines, which each caller filters for its node (#29).
NODE_JOBS = Kind("node-jobs", lambda node: squeue_scan(node=node), lambda _: squeue_scan(), per_item_errors=False,
                 answers_each=True)


async def read_node_jobs(coalescer: Coalescer, node: str) -> CommandResult:
    """The lines of this tick's shared job read: node `node`'s jobs alone, or every job's (the
    caller keeps its node's). A failed read is every caller's error, as its own would have been."""
    return (await coalescer.run(NODE_JOBS, (), node)).result
