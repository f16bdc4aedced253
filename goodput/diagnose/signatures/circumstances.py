"""What the job was doing when it failed, and what that changes about the verdict.

The same failure line means different things in different circumstances. A collective timeout
while a checkpoint save is still running is the save's storage, not the network; one among the
first few collectives of a job is set-up that never finished, not a hang. A transport error on
the very first transfer after NCCL connected is a fabric that was never configured, not a link
that broke. The watchdog stuck on several ranks at once is the program deadlocked, not one bad
GPU; a stack dump whose main thread waits on its data loader is the input pipeline. A step
cancelled before anything failed was cancelled by someone. Tasks Slurm terminated are teardown,
and the one task missing from their list is the one that failed. A CUDA OOM's own figures say whether
the process filled the device, the free memory was fragmented, or another process held it (`cuda_oom`).

`Circumstances` watches the hits of one log in line order (bounded memory, like the locator) and
`synthesize` turns what it saw into hits of the synthetic signatures below, which then compete
with the real ones by the usual rules (role, precedence, line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from goodput.diagnose.signatures.cuda_oom import OomReader
from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, LineContext, Match, Role, Signature
from goodput.models import Category, CulpritKind, RestartEffect
from goodput.untrusted_text import bounded_int

# A transport error this many lines after a communicator's "Init COMPLETE" is on its first transfer.
# (Channel set-up lines are no such mark: NCCL connects channels lazily, at any point of a run.)
SETUP_SPAN = 10
# Watchdog timeouts at sequence numbers up to this are among a process group's first collectives.
STARTUP_SEQ = 3
# A py-spy dump lists a thread's innermost frames first; where it waits shows in the first few.
MAIN_THREAD_FRAMES = 6
MAX_TASK_LINES = 1000
MAX_RANGES_PER_LINE = 64

_SETUP_IDS = frozenset({"nccl-init-rank"})
_TIMEOUT_ID = "nccl-watchdog-timeout"
_HEARTBEAT_ID = "nccl-heartbeat-stuck"
# Sockets bound where no other host reaches them: NCCL on loopback or a container bridge, Gloo on loopback.
_LOCAL_INTERFACE_IDS = frozenset({"nccl-socket-local-interface", "gloo-loopback-fallback"})


def _synthetic(sig_id: str, family: str, category: Category, culprit: CulpritKind, precedence: int,
               restart: bool, explanation: str, effect: RestartEffect = RestartEffect.NONE) -> Signature:
    return Signature(id=sig_id, family=family, category=category, culprit_kind=culprit, precedence=precedence,
                     pattern=r"\A\z", literals=(sig_id,), restart=restart, drain=False, restart_effect=effect,
                     explanation=explanation)


SAVE_STALLED = _synthetic(
    "checkpoint-save-stalled", "storage", Category.STORAGE, CulpritKind.STORAGE, 32, True,
    "A collective timed out while a checkpoint save was still running (its start is in the log, its end is "
    "not): the other ranks waited in the next collective for the rank still writing. Slow or stuck checkpoint "
    "storage, not the network; restart, and check the filesystem (or save asynchronously, or raise the "
    "timeout above the save time).")
STARTUP_TIMEOUT = _synthetic(
    "nccl-timeout-at-startup", "torch-nccl", Category.APP_ERROR, CulpritKind.APP, 31, False,
    f"The collectives that timed out are among the first the job ran (sequence number {STARTUP_SEQ} or "
    "lower): the ranks never got into step. One rank was still doing its set-up (data preparation, a "
    "download, compilation) for longer than the process-group timeout, or cannot reach the others; a "
    "restart repeats the same set-up, so fix it first (prepare the data beforehand, raise the timeout).")
JOB_WIDE_WATCHDOG = _synthetic(
    "nccl-watchdog-stuck-everywhere", "torch-nccl", Category.HANG, CulpritKind.APP, 27, False,
    "The NCCL watchdog is stuck on several ranks at once, with no collective timeout or hardware error: a "
    "broken GPU would block the watchdog of its own rank only, so the whole program is deadlocked (a thread "
    "holding the GIL inside a CUDA call, collectives issued in different orders, a hang in process-group "
    "teardown). An unchanged restart deadlocks again; a stack dump of every rank shows where.")
INPUT_PIPELINE_HANG = _synthetic(
    "input-pipeline-hang", "hang", Category.HANG, CulpritKind.APP, 23, False,
    "A stack dump shows the main thread waiting on its own data loader (an iterator blocked on its queue), "
    "not in a collective: the program's input pipeline hangs (a data-loader worker deadlock or starvation) "
    "and the other ranks wait for this one. No hardware is implicated and the same configuration hangs "
    "again; try num_workers=0 or dump the loader's workers.")
OWNER_CANCEL = _synthetic(
    "slurm-step-cancelled-first", "slurm", Category.UNKNOWN, CulpritKind.UNKNOWN, 0, False,
    "A job step was cancelled before anything in the log failed (no reason in the banner, no task or node "
    "failure before it): its owner or an administrator ended it (scancel). Honour that and do not restart it; "
    "whatever fails while it is being torn down (a node that cannot kill it) is handled on its own.",
    effect=RestartEffect.NEVER)


class Circumstances:
    """Facts about the log around its failure lines, collected in line order."""

    def __init__(self) -> None:
        self._failures = 0
        self._save_open: Match | None = None
        self._timeouts_seen = False
        self.save_in_flight: Match | None = None
        self._setup_at: int | None = None
        self._network_seen = False
        self.first_transfer: Match | None = None
        # NCCL's sockets on loopback or a container bridge (`Bootstrap : Using lo:127.0.0.1<0>`), or
        # Gloo's on loopback (`Using the loopback address as fallback`).
        self.local_interface: Match | None = None
        self._main_thread_at: int | None = None
        self.data_wait: Match | None = None
        self.owner_cancel: Match | None = None
        # (host, first task, the rest of the task list) of tasks Slurm terminated or killed.
        self._terminated: list[tuple[str | None, str, str]] = []
        self._oom = OomReader()

    def observe(self, match: Match) -> None:
        self._oom.observe(match)
        sig = match.signature
        sig_id = sig.id
        line = match.line_no
        if sig_id == "checkpoint-save-started":
            self._save_open = match
        elif sig_id == "checkpoint-save-done":
            self._save_open = None
        elif sig_id in _SETUP_IDS:
            self._setup_at = line
        elif sig_id in _LOCAL_INTERFACE_IDS and self.local_interface is None:
            self.local_interface = match
        elif sig_id == "py-spy-dump":
            self._main_thread_at = line if '"MainThread"' in match.text else None
        elif (sig_id == "py-spy-data-frame" and self.data_wait is None and self._main_thread_at is not None
              and 0 < line - self._main_thread_at <= MAIN_THREAD_FRAMES):
            self.data_wait = match
        elif sig_id == "srun-task-exit" and match.groups.get("action") and len(self._terminated) < MAX_TASK_LINES:
            self._terminated.append((match.host, match.groups.get("task", ""), match.groups.get("detail", "")))
        if sig_id == _TIMEOUT_ID and not self._timeouts_seen:
            self._timeouts_seen = True
            self.save_in_flight = self._save_open
        elif sig.role is Role.ROOT:
            # A save that failed (or a rank that died during it) is not in flight any more: that
            # failure, not the save's slowness, is what the others waited for.
            self._save_open = None
        if sig_id == "slurm-step-cancelled" and self._failures == 0 and self.owner_cancel is None:
            self.owner_cancel = _as(OWNER_CANCEL, match)
        if sig.role is Role.ROOT and sig.category is Category.NETWORK and not self._network_seen:
            self._network_seen = True
            if self._setup_at is not None and 0 < line - self._setup_at <= SETUP_SPAN:
                self.first_transfer = match
        if sig.role in (Role.ROOT, Role.KNOCK_ON):
            self._failures += 1

    def synthesize(self, hits: Sequence[Match], timeouts: Sequence[Match],
                   reporter: Callable[[Match], int | None]) -> list[Match]:
        """The synthetic hits these circumstances add to the log's own."""
        found: list[Match] = []
        if timeouts and self.save_in_flight is not None:
            found.append(_as(SAVE_STALLED, self.save_in_flight))
        seqs = [bounded_int(m.groups.get("code"), max_digits=MAX_RANK_DIGITS) for m in timeouts]
        if seqs and all(s is not None and s <= STARTUP_SEQ for s in seqs):
            found.append(_as(STARTUP_TIMEOUT, timeouts[0]))
        stuck = [m for m in hits if m.signature.id == _HEARTBEAT_ID]
        if len({r for r in (reporter(m) for m in stuck) if r is not None}) > 1:
            found.append(_as(JOB_WIDE_WATCHDOG, stuck[0]))
        if self.data_wait is not None:
            found.append(_as(INPUT_PIPELINE_HANG, self.data_wait))
        return found + self._oom.synthesize()

    def fabric_configuration(self, sig: Signature) -> str | None:
        """Why a network failure decided by `sig` is the fabric's configuration, which an unchanged
        restart repeats; None when nothing in the log says so. Only a fault between hosts: an error a
        node's own HCA reports (named by its host) is that node's to settle, whenever it came."""
        if sig.category is not Category.NETWORK or sig.culprit_kind is CulpritKind.NODE:
            return None
        first = self.first_transfer
        if first is not None and sig.culprit_kind is CulpritKind.NETWORK:
            return (f"Not restarted: the error came on the first transfer after NCCL connected (line "
                    f"{first.line_no}): the hosts never exchanged data, a fabric configuration fault (GID index, "
                    "routing, security group) that an unchanged restart repeats.")
        local = self.local_interface
        if local is None:
            return None
        where = local.groups.get("detail", "a local interface")
        if local.signature.id == "gloo-loopback-fallback":
            return (f"Not restarted: Gloo's sockets use {where} (line {local.line_no}), because the host's name "
                    "did not resolve to one of its addresses; other hosts cannot reach it, so every attempt fails "
                    "the same way until GLOO_SOCKET_IFNAME or the name's resolution is fixed.")
        if where.startswith(("veth", "br-")):
            why = "a container's own interface, which NCCL does not exclude by default"
        else:
            why = "which NCCL only picks when no other interface is available or NCCL_SOCKET_IFNAME asks for it"
        return (f"Not restarted: NCCL's sockets use {where} (line {local.line_no}), {why}; other hosts cannot "
                "reach it, so every attempt fails the same way until the interface is configured.")

    def failed_task(self) -> tuple[int, str | None] | None:
        """The one task missing from the tasks Slurm terminated, and their host if they share one."""
        intervals: list[tuple[int, int]] = []
        for _, first, rest in self._terminated:
            parsed = _task_ranges(first + rest)
            if parsed is None:
                return None
            intervals += parsed
        if not intervals:
            return None
        intervals.sort()
        merged = [intervals[0]]
        for lo, hi in intervals[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        # Exactly one task missing, below the highest terminated one; ranks above may simply not be shown.
        if len(merged) == 1 and merged[0][0] == 1:
            gap = 0
        elif len(merged) == 2 and merged[0][0] == 0 and merged[1][0] - merged[0][1] == 2:
            gap = merged[0][1] + 1
        else:
            return None
        hosts = {host for host, _, _ in self._terminated}
        return gap, (next(iter(hosts)) if len(hosts) == 1 else None)


def _task_ranges(text: str) -> list[tuple[int, int]] | None:
    """`0-57,59-63` as intervals; None for anything that is not a plain task list."""
    out: list[tuple[int, int]] = []
    for part in text.split(",", MAX_RANGES_PER_LINE)[:MAX_RANGES_PER_LINE]:
        lo_text, _, hi_text = part.partition("-")
        lo = bounded_int(lo_text, max_digits=MAX_RANK_DIGITS)
        hi = bounded_int(hi_text, max_digits=MAX_RANK_DIGITS) if hi_text else lo
        if lo is None or hi is None or hi < lo:
            return None
        out.append((lo, hi))
    return out


def _as(signature: Signature, match: Match) -> Match:
    """A synthetic hit on the line of a real one, without its rank or host: the line that shows the
    circumstance is usually printed by a rank that is not to blame."""
    return dataclasses.replace(match, signature=signature, groups={}, context=LineContext())
