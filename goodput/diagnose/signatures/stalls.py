"""Hangs and stragglers from evidence spread over many lines: who is the odd one out.

A stalled job rarely prints one line that names the culprit. What it leaves is a set: stack dumps
of every rank (py-spy, Python's faulthandler), where all ranks but one wait in a collective and
that one is somewhere else (the one they all wait for); an nvidia-smi table where one GPU is idle
while its peers spin at 100 % in an NCCL kernel (its process never launched the collective); a
per-rank table of step times where one rank is many deviations slower than the rest (a straggler);
a host that answers ping but not ssh (its kernel is up, its user space is wedged: the node, not
its GPU). One row of any of these says nothing; the rows together do. The catalogue's locator entries in
`data/hang.toml` find the rows (cheaply: their literals are collective names and table cell
endings that progress lines never hold); `Stalls` collects them in line order, bounded whatever
the log holds, and `synthesize` turns an odd one out into a hit of the synthetic signatures below,
which then competes with the log's own hits by the usual rules.

No drain rests on a stack or a utilisation table: they say where a program waits, not that
hardware failed. A straggler follows the project's straggler policy (drain a node only when the
log names it), with the live detector's robust statistic (`goodput.robust`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from goodput.diagnose.signatures.model import LineContext, Match, Role, Signature
from goodput.models import Category, CulpritKind
from goodput.robust import slow_outliers
from goodput.untrusted_text import bounded_int

# Bounds: a hostile log can add rows, never memory.
MAX_GROUPS = 4096
MAX_HOSTS = 1024
MAX_GPUS_PER_HOST = 64
MAX_SERIES_RANKS = 16384
MAX_SAMPLES = 32
MAX_UNITS = 8
MAX_CSV_COLUMNS = 16
# nvidia-smi's utilisation: a GPU spinning in an NCCL kernel reads at or near 100 %, one whose
# process never launched the collective near 0 %.
BUSY_PERCENT = 90
IDLE_PERCENT = 5
MIN_BUSY_PEERS = 2
# The live straggler detector's defaults (goodput.detect.straggler.StragglerConfig), which diagnosis
# may not import: 6 robust sigma and 10 % slower, among at least 4 ranks.
STRAGGLER_Z = 6.0
STRAGGLER_MIN_SLOWDOWN = 0.10
STRAGGLER_MIN_RANKS = 4
# A frame in one of these (function or file) is a rank waiting in a collective.
COLLECTIVE_MARKS = ("distributed_c10d", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
                    "all_to_all", "alltoall", "barrier", "broadcast", "nccl")
_RATE_UNITS = frozenset({"it/s", "samples/s", "samples/sec", "tokens/s", "tok/s", "TFLOP/s", "TFLOPS", "TFLOPs"})
_MS_UNITS = frozenset({"ms/it", "ms/step", "ms"})
_FRAME_IDS = frozenset({"stack-frame-faulthandler", "stack-frame-py-spy"})
_DUMP_ID = "py-spy-dump"  # the catalogue's thread header (py-spy and faulthandler)
_DATA_FRAME_ID = "py-spy-data-frame"
_STALL_CATEGORIES = frozenset({Category.HANG, Category.NCCL_TIMEOUT})

_STACKS_SOURCE = ("py-spy README: dump; Python docs, faulthandler (dump_traceback, dump_traceback_later); "
                  "PyTorch docs, torch.distributed: Debugging (a hang is a rank that never reached the collective)")
_SMI_SOURCE = ("NVIDIA, nvidia-smi documentation: Utilization.GPU (percent of time over the past sample period "
               "during which one or more kernels was executing)")


def _synthetic(sig_id: str, category: Category, culprit: CulpritKind, precedence: int, restart: bool,
               source: str, explanation: str, *, drain: bool = False) -> Signature:
    return Signature(id=sig_id, family="hang", category=category, culprit_kind=culprit, precedence=precedence,
                     pattern=r"\A\z", literals=(sig_id,), restart=restart, drain=drain, source_local=False,
                     source=source, explanation=explanation)


# Above py-spy's bare dump (22) and faulthandler's own timeout banner (24): it says which rank.
STACK_ODD_ONE_OUT = _synthetic(
    "stack-odd-one-out", Category.HANG, CulpritKind.RANK, 25, True, _STACKS_SOURCE,
    "Stack dumps of several ranks: all but one wait inside a collective, and this one is elsewhere (its own "
    "code, I/O, a lock): the others are waiting for it. It hung; restart, and no hardware is blamed on a stack.")
GPU_IDLE_ODD_ONE_OUT = _synthetic(
    "gpu-idle-odd-one-out", Category.HANG, CulpritKind.GPU, 25, True, _SMI_SOURCE,
    "During the stall nvidia-smi shows this GPU idle while its peers are busy: the peers spin in a collective "
    "kernel waiting for it, and its process never launched the collective. The process on this GPU is the "
    "one the others wait for; utilisation alone does not prove the GPU faulty, so nothing is drained.")
GPUS_ALL_BUSY = _synthetic(
    "gpus-all-busy-stalled", Category.HANG, CulpritKind.UNKNOWN, 21, True, _SMI_SOURCE,
    "During the stall nvidia-smi shows every GPU busy: all ranks are inside the same collective and none "
    "completes it, a hung collective with no single culprit in this table (look at the ranks on other hosts, "
    "or at the network).")
STACK_ODD_HOST_OUT = _synthetic(
    "stack-odd-host-out", Category.HANG, CulpritKind.NODE, 25, True, _STACKS_SOURCE,
    "Stack dumps from several hosts: on all but one the process waits inside a collective, and on this host it "
    "is elsewhere (its own code, I/O, a lock): the others are waiting for it. It hung; restart, and no hardware "
    "is blamed on a stack.")
NODE_USERSPACE_DEAD = _synthetic(
    "node-answers-ping-not-ssh", Category.NODE_FAILURE, CulpritKind.NODE, 84, True,
    "iputils ping(8) and OpenSSH ssh(1) client messages; Linux kernel net/ipv4/icmp.c (echo requests are "
    "answered by the kernel, with no user-space process)",
    "The host answers ping but not ssh: its kernel still answers echo requests, while sshd (user space) does "
    "not accept or answer a connection. The node is wedged (memory exhaustion, a hung filesystem, tasks stuck "
    "in the kernel), not its GPU; nothing on it makes progress until it is rebooted. Drain it and restart the "
    "job elsewhere.", drain=True)
RANK_STRAGGLER = _synthetic(
    "rank-step-straggler", Category.STRAGGLER, CulpritKind.RANK, 20, True,
    "goodput straggler detection (goodput.robust: median and MAD across ranks, the live detector's thresholds)",
    "A per-rank table of step time or throughput: this rank is many robust deviations and more than 10 % "
    "slower than the median rank, and every collective waits for it. Restart away from its node (drained "
    "when the log names it).", drain=True)


@dataclass(frozen=True, slots=True)
class StallCulprit:
    """An odd one out that can name the culprit of a stall another line decided."""

    match: Match
    reason: str


class Stalls:
    """Stack dumps, GPU tables and per-rank timings of one log, collected in line order."""

    def __init__(self) -> None:
        self._pid: str | None = None
        # Stack dumps: who dumped (first header), who has a collective frame, who waits on data.
        self._dumped: dict[tuple[str | None, int | None, str | None], Match] = {}
        self._in_collective: set[tuple[str | None, int | None, str | None]] = set()
        self._data_wait: set[tuple[str | None, int | None, str | None]] = set()
        # GPU tables: host -> bus id (or index) -> (utilisation, the row's match); the pending row.
        self._gpus: dict[str | None, dict[str, tuple[int, Match]]] = {}
        self._pending: dict[str | None, str] = {}
        self._csv: dict[str | None, tuple[int, int | None, int | None, int]] = {}
        # Per-rank timings: unit -> rank -> samples (seconds-like: larger is slower), and a row each.
        self._series: dict[str, dict[int, list[float]]] = {}
        self._rows: dict[int, Match] = {}
        self._stalled = False
        # Hosts that answered ping, and hosts ssh could not reach (bounded sets of names).
        self._pinged: dict[str, Match] = {}
        self._no_ssh: dict[str, Match] = {}
        self._handlers = self._by_signature()

    def observe(self, match: Match) -> None:
        sig_id = match.signature.id
        handler = self._handlers.get(sig_id)
        if handler is not None:
            handler(match)
        elif sig_id in _FRAME_IDS:
            self._frame(match)
        # Any hang or timeout line, a stack dump's own header included (someone dumped a stuck process).
        if match.signature.role in (Role.ROOT, Role.KNOCK_ON) and match.signature.category in _STALL_CATEGORIES:
            self._stalled = True

    @property
    def stalled(self) -> bool:
        """Whether any hang or timeout line (a stack dump's header included) was seen."""
        return self._stalled

    def _by_signature(self) -> dict[str, Callable[[Match], None]]:
        return {"py-spy-process": self._process, _DUMP_ID: self._dump, _DATA_FRAME_ID: self._data_frame,
                "nvidia-smi-gpu-row": self._gpu_row, "nvidia-smi-util-row": self._util_row,
                "nvidia-smi-query-header": self._csv_header, "nvidia-smi-query-row": self._csv_row,
                "ping-reply": self._ping, "ssh-connect-failed": self._ssh_failed,
                "rank-step-time": self._timing_row, "megatron-rank-time": self._timing_row}

    def _process(self, match: Match) -> None:
        self._pid = match.groups.get("code")

    def _dump(self, match: Match) -> None:
        key = self._who(match)
        if key not in self._dumped and len(self._dumped) < MAX_GROUPS:
            self._dumped[key] = match

    def _frame(self, match: Match) -> None:
        where = match.groups.get("detail", "") + " " + match.groups.get("path", "")
        if any(mark in where for mark in COLLECTIVE_MARKS) and len(self._in_collective) < MAX_GROUPS:
            self._in_collective.add(self._who(match))

    def _data_frame(self, match: Match) -> None:
        if len(self._data_wait) < MAX_GROUPS:
            self._data_wait.add(self._who(match))

    def _gpu_row(self, match: Match) -> None:
        host = self._host(match)
        if host in self._pending or len(self._pending) < MAX_HOSTS:
            self._pending[host] = _pci(match.groups.get("pci", ""))

    def _util_row(self, match: Match) -> None:
        pci = self._pending.pop(self._host(match), None)
        if pci is not None:
            self._gpu(match, pci, bounded_int(match.groups.get("code"), max_digits=3))

    def _ping(self, match: Match) -> None:
        for name in (match.groups.get("host"), match.groups.get("peer")):
            if name and len(self._pinged) < MAX_HOSTS:
                self._pinged.setdefault(name.lower(), match)

    def _ssh_failed(self, match: Match) -> None:
        name = match.groups.get("host") or match.groups.get("peer") or match.groups.get("path")
        if name and len(self._no_ssh) < MAX_HOSTS:
            self._no_ssh.setdefault(name.lower(), match)

    def _timing_row(self, match: Match) -> None:
        self._timing(match, match.groups.get("code") or "ms")

    def _who(self, match: Match) -> tuple[str | None, int | None, str | None]:
        """The process a stack line belongs to: its launcher prefix, else the py-spy dump it is in."""
        ctx = match.context
        if ctx.host is not None or ctx.rank is not None or ctx.task is not None:
            return ctx.host, ctx.rank if ctx.rank is not None else ctx.task, None
        return None, None, self._pid

    @staticmethod
    def _host(match: Match) -> str | None:
        ctx = match.context
        return match.host or (f"task {ctx.task}" if ctx.task is not None else None)

    def _gpu(self, match: Match, gpu: str, util: int | None) -> None:
        if util is None or util > 100:
            return
        host = self._host(match)
        table = self._gpus.get(host)
        if table is None:
            if len(self._gpus) >= MAX_HOSTS:
                return
            table = self._gpus[host] = {}
        if gpu in table or len(table) < MAX_GPUS_PER_HOST:
            table[gpu] = (util, match)

    def _csv_header(self, match: Match) -> None:
        columns = [c.strip() for c in match.groups.get("detail", "").split(",")][:MAX_CSV_COLUMNS]
        util = next((i for i, c in enumerate(columns) if c.startswith("utilization.gpu")), None)
        if util is None:
            return
        pci = next((i for i, c in enumerate(columns) if c.startswith("pci.bus_id")), None)
        index = next((i for i, c in enumerate(columns) if c == "index"), None)
        if len(self._csv) < MAX_HOSTS or self._host(match) in self._csv:
            self._csv[self._host(match)] = (util, pci, index, len(columns))

    def _csv_row(self, match: Match) -> None:
        layout = self._csv.get(self._host(match))
        if layout is None:
            return
        util, pci, index, width = layout
        cells = [c.strip() for c in match.groups.get("detail", "").split(",", MAX_CSV_COLUMNS)]
        if len(cells) != width or not cells[util].endswith(" %"):
            return
        if pci is not None:
            gpu = _pci(cells[pci])
        elif index is not None:
            gpu = f"GPU {cells[index][:8]}"
        else:
            return
        self._gpu(match, gpu, bounded_int(cells[util][:-2].strip(), max_digits=3))

    def _timing(self, match: Match, unit: str) -> None:
        rank = match.rank
        value = _number(match.groups.get("detail", ""))
        if rank is None or value is None or value <= 0:
            return
        series = self._series.get(unit)
        if series is None:
            if len(self._series) >= MAX_UNITS:
                return
            series = self._series[unit] = {}
        samples = series.get(rank)
        if samples is None:
            if len(series) >= MAX_SERIES_RANKS:
                return
            samples = series[rank] = []
        # Throughput: the straggler is the slow one, so compare time per unit of work.
        samples.append(1.0 / value if unit in _RATE_UNITS else value)
        del samples[:-MAX_SAMPLES]
        self._rows.setdefault(rank, match)

    def synthesize(self) -> list[Match]:
        """The synthetic hits the collected rows add to the log's own."""
        found: list[Match] = []
        odd = self.odd_stack()
        if odd is not None:
            found.append(odd.match)
        if self._stalled:
            idle = self.idle_gpu()
            busy = self._all_busy() if idle is None else None
            found += [m for m in (idle.match if idle else None, busy) if m is not None]
        straggler = self.straggler()
        if straggler is not None:
            found.append(straggler.match)
        unresponsive = self._ping_not_ssh()
        if unresponsive is not None:
            found.append(unresponsive)
        return found

    def _ping_not_ssh(self) -> Match | None:
        """A host that answered ping and refused or ignored ssh (the first such ssh failure)."""
        for name, failed in sorted(self._no_ssh.items(), key=lambda item: item[1].line_no):
            if name in self._pinged:
                g = failed.groups
                host = g.get("host") or g.get("peer") or g.get("path") or name
                return dataclasses.replace(failed, signature=NODE_USERSPACE_DEAD, groups={"host": host},
                                           context=LineContext(host=host))
        return None

    def odd_stack(self) -> StallCulprit | None:
        """The one dumped process that waits outside every collective while the others wait inside."""
        if len(self._dumped) < 2:
            return None
        outside = [key for key in self._dumped if key not in self._in_collective]
        if len(outside) != 1:
            return None
        key = outside[0]
        if key in self._data_wait:
            return None  # the input pipeline's own reading (circumstances) says more: it will hang again
        host, rank, _ = key
        if host is None and rank is None:
            return None  # a process known by its pid alone names no rank or host to blame
        first = self._dumped[key]
        who = f"rank {rank}" if rank is not None else f"the process on {host}"
        reason = (f"{len(self._dumped) - 1} other dumped processes wait in a collective; {who}'s stack (from line "
                  f"{first.line_no}) is elsewhere.")
        signature = STACK_ODD_ONE_OUT if rank is not None else STACK_ODD_HOST_OUT
        hit = dataclasses.replace(first, signature=signature, groups={}, context=LineContext(host=host, rank=rank))
        return StallCulprit(hit, reason)

    def idle_gpu(self) -> StallCulprit | None:
        """The one idle GPU of a host whose other GPUs are busy (the first such host)."""
        for host, table in self._gpus.items():
            idle = [gpu for gpu, (util, _) in table.items() if util <= IDLE_PERCENT]
            busy = [gpu for gpu, (util, _) in table.items() if util >= BUSY_PERCENT]
            if len(idle) == 1 and len(busy) >= MIN_BUSY_PEERS and len(idle) + len(busy) == len(table):
                gpu = idle[0]
                row = table[gpu][1]
                groups = {"host": host} if host and not host.startswith("task ") else {}
                if not gpu.startswith("GPU "):
                    groups["pci"] = gpu
                hit = dataclasses.replace(row, signature=GPU_IDLE_ODD_ONE_OUT, groups=groups, context=row.context)
                where = f" on {host}" if host else ""
                return StallCulprit(hit, f"nvidia-smi{where}: {gpu} idle while {len(busy)} GPUs are busy.")
        return None

    def _all_busy(self) -> Match | None:
        rows = [(util, m) for table in self._gpus.values() for util, m in table.values()]
        if len(rows) >= MIN_BUSY_PEERS and all(util >= BUSY_PERCENT for util, _ in rows):
            first = min((m for _, m in rows), key=lambda m: m.line_no)
            return dataclasses.replace(first, signature=GPUS_ALL_BUSY, groups={}, context=LineContext())
        return None

    def straggler(self) -> StallCulprit | None:
        """The slowest robust outlier of the first unit whose table has one."""
        for unit, series in self._series.items():
            medians = {rank: statistics.median(samples) for rank, samples in series.items()}
            found = slow_outliers(medians, z=STRAGGLER_Z, min_slowdown=STRAGGLER_MIN_SLOWDOWN,
                                  min_count=STRAGGLER_MIN_RANKS)
            if found:
                top = found[0]
                row = self._rows[top.key]
                hit = dataclasses.replace(row, signature=RANK_STRAGGLER, groups={},
                                          context=LineContext(host=row.host, rank=top.key))
                return StallCulprit(hit, (f"rank {top.key} is {top.slowdown:.0%} slower than the median of "
                                          f"{len(medians)} ranks ({unit}, {top.robust_z:.1f} robust sigma)."))
        return None

    def culprit(self) -> StallCulprit | None:
        """For a stall decided by another line that names nobody: the odd one out, if any."""
        return self.odd_stack() or (self.idle_gpu() if self._stalled else None)


def _pci(text: str) -> str:
    """nvidia-smi's `00000000:3B:00.0` as the usual `0000:3b:00.0`."""
    domain, _, rest = text.strip().lower().partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}" if rest else text.strip().lower()[:16]


def _number(text: str) -> float | None:
    """A bounded decimal (the pattern allows at most 9 + 9 digits), or None."""
    if not text or len(text) > 20:
        return None
    try:
        return float(text)
    except ValueError:
        return None
