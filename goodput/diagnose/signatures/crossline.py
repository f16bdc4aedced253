"""Facts that no single line states, read from several lines together.

One line says "rank 3 timed out in all-reduce 812"; only the set of such lines says which rank
did *not* time out (the one the others were waiting for). One Xid 31 is an application's bad
pointer; the same GPU faulting under four different processes is the GPU, unless every one of them
faulted at the same address (the same program writing past the same buffer, again and again). One heartbeat-monitor
line names a rank; the same line from every rank names nobody. These rules look across the hits
of one log; each is pure, bounded (its inputs are the builder's bounded hit lists) and returns
either nothing or the fact it found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from goodput.diagnose.signatures.hostshape import ipv4
from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, LineContext, Match, Role, Signature
from goodput.models import Category, CulpritKind
from goodput.untrusted_text import LinearRegex, bounded_int, utf8

# Below this many reporting ranks a gap in their numbers says more about where the excerpt was cut
# than about who stopped.
MIN_REPORTERS_FOR_SILENT_RANK = 3
# Distinct processes hitting an "application" Xid on one GPU before the GPU itself is suspected.
RECURRING_XID_PROCESSES = 3
_APP_XIDS = frozenset({"xid-13", "xid-31"})
_PID = LinearRegex(r"\bpid=(\d{1,9})\b")
# The faulting virtual address of an Xid 31 (`faulted @ 0x7f1c_9a000000`), bounded.
_FAULT_ADDRESS = LinearRegex(r"\bfaulted @ (0x[0-9A-Fa-f_]{1,24})\b")

RECURRING_XID = Signature(
    id="xid-app-recurring", family="xid", category=Category.GPU_HARDWARE, culprit_kind=CulpritKind.GPU,
    precedence=101, pattern=r"NVRM: Xid", literals=("NVRM: Xid",), restart=True, drain=True,
    source=("NVIDIA, Analyzing Xid Errors with the Xid Catalog, Table 1 Xids: Xid 13/31 investigatory "
            "WORKFLOW_XID_13/WORKFLOW_XID_31 (repeating on the same GPU: possible hardware issue, run diagnostics)"),
    explanation=(f"Application-class Xids (13, 31) on one GPU under {RECURRING_XID_PROCESSES} or more "
                 "different processes: one program's bad pointer does not follow a GPU across processes; "
                 "the GPU (or its memory) is faulty. Drain the node and reset or replace the GPU."))

SAME_ADDRESS_XID31 = Signature(
    id="xid-31-same-address", family="xid", category=Category.APP_ERROR, culprit_kind=CulpritKind.APP,
    precedence=54, pattern=r"NVRM: Xid", literals=("NVRM: Xid",), restart=False, drain=False,
    source=("NVIDIA, Analyzing Xid Errors with the Xid Catalog, Table 1 Xids: Xid 31 RESTART_APP, "
            "investigatory WORKFLOW_XID_31"),
    explanation=("Xid 31 (GPU memory page fault) repeated under several processes, every time at the same "
                 "faulting address: the same program faults on the same access each time it runs, a "
                 "deterministic out-of-bounds access in the application, not a faulty GPU (NVIDIA's bucket "
                 "for Xid 31 is RESTART_APP, and its investigation is the application's). Fix the program; "
                 "an unchanged restart faults again."))


# A task stuck in uninterruptible sleep whose stack, within this many lines, is inside the driver.
DRIVER_FRAME_SPAN = 40
DRIVER_HANG = Signature(
    id="gpu-driver-hang", family="gpu", category=Category.HANG, culprit_kind=CulpritKind.NODE, precedence=96,
    pattern=r"state:D", literals=("state:D",), restart=True, drain=True,
    explanation=("A process is stuck in uninterruptible sleep inside the NVIDIA driver (its kernel stack "
                 "runs through nvidia/nvidia_uvm): the GPU or its driver hangs, nothing on this node makes "
                 "progress until the node is reset. Drain it and restart the job elsewhere."))


# Connection errors whose `peer` group names the other end of a socket NCCL itself opened.
_PEER_CLOSED_IDS = frozenset({"nccl-socket-closed"})
SAME_HOST_PEER = Signature(
    id="nccl-peer-on-same-host", family="nccl-net", category=Category.APP_ERROR, culprit_kind=CulpritKind.APP,
    role=Role.KNOCK_ON, precedence=25, pattern=r"Connection closed by", literals=("Connection closed by",),
    restart=True, drain=False, settles=False,
    source=("NVIDIA NCCL User Guide, API types: ncclResult_t, ncclRemoteError (6): a call failed possibly due "
            "to a network error or a remote process exiting prematurely"),
    explanation=("NCCL's socket to a peer on the same host was closed: no network lies between two "
                 "processes of one node, so of the two readings NCCL gives (a network error, a remote "
                 "process exiting) only the second remains. A process of this node died first; its own "
                 "error (a crash, an OOM kill) is the cause, not the fabric. Restart once; if it recurs, "
                 "the dying process's output says why."))


def _first_label(name: str | None) -> str | None:
    """A host's short name (`node7.cluster.local` is `node7`, as `hostname -s` says); an address whole."""
    if not name:
        return None
    return name if ipv4(name) else name.split(".", 1)[0].lower()


def same_host_peer(hits: Iterable[Match], resolve: Callable[[str | None], str | None]) -> Match | None:
    """The first closed NCCL socket whose peer is the host that printed the line (a process of the
    same node exited), re-labelled as that knock-on. `resolve` turns a host or an address into the
    node the log itself says it is (`Locator.name_of`): a peer given as the host's own address counts."""
    for m in sorted(hits, key=lambda m: m.line_no):
        peer = m.groups.get("peer")
        if m.signature.id not in _PEER_CLOSED_IDS or not peer or not m.context.host:
            continue
        local = _first_label(resolve(m.context.host))
        if local and local == _first_label(resolve(peer)):
            return Match(signature=SAME_HOST_PEER, line_no=m.line_no, text=m.text, groups={}, context=LineContext())
    return None


@dataclass(frozen=True, slots=True)
class SilentRank:
    rank: int
    reporters: int
    seq: str
    op: str


def silent_rank(timeouts: Iterable[Match], reporter: Callable[[Match], int | None]) -> SilentRank | None:
    """The one rank missing among the ranks that timed out in the same collective, if exactly one is.

    Every rank of a collective waits for the slowest; the watchdog fires on all of them except the
    one that never arrived (it is busy elsewhere: a data loader, a different code path, a hung GPU).
    Only a single gap below the highest reporting rank counts: ranks above it may simply not be in
    the excerpt.
    """
    groups: dict[tuple[str, str, str], set[int]] = {}
    for m in timeouts:
        rank = reporter(m)
        if rank is None:
            continue
        g = m.groups
        groups.setdefault((g.get("pg", ""), g.get("code", ""), g.get("op", "")), set()).add(rank)
    for (_, seq, op), ranks in groups.items():
        # Exactly one gap in 0..max: the count says so without building the range (a hostile line
        # can claim rank 999,999,999).
        if len(ranks) < MIN_REPORTERS_FOR_SILENT_RANK or max(ranks) != len(ranks):
            continue
        gap = next(expected for expected, rank in enumerate([*sorted(ranks), -1]) if rank != expected)
        return SilentRank(rank=gap, reporters=len(ranks), seq=seq, op=op)
    return None


# PyTorch's per-rank progress after a collective timeout: `last enqueued work: N` (the watchdog's
# status) or `Last enqueued NCCL work: N` (a rank told of another's timeout), and the process group.
_LAST_ENQUEUED = LinearRegex(r"[Ll]ast enqueued(?: NCCL)? work: (\d{1,12})")
_PROGRESS_PG = LinearRegex(r"\[PG (?:ID )?(\d{1,6})")
RANKS_BEHIND = Signature(
    id="nccl-ranks-behind", family="torch-nccl", category=Category.APP_ERROR, culprit_kind=CulpritKind.APP,
    precedence=47, pattern=r"\A\z", literals=("nccl-ranks-behind",), restart=False, drain=False, settles=False,
    source=("PyTorch, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: after a collective timeout every rank "
            "reports its last enqueued and last completed work; a rank told of another's timeout is told it "
            "is most likely caused by incorrect usage of collectives (wrong sizes across ranks, collectives "
            "in a different order on some ranks, or a scheduled collective that did not run), and less often "
            "by a GIL deadlock, network errors or bugs in the communications library"),
    explanation=("Some ranks never enqueued the collective the others timed out in: their last enqueued "
                 "work is below the timed-out sequence number, so they were not waiting in it but "
                 "somewhere else in the program (another code path, a different number of collectives, an "
                 "exit taken on some ranks only). PyTorch names incorrect collective usage as the most "
                 "likely cause; an unchanged restart follows the same path. The ranks that fell behind "
                 "are named."))


def _progress_of(m: Match) -> tuple[str, int] | None:
    data = utf8(m.text)
    enqueued = _LAST_ENQUEUED.search(data)
    value = bounded_int(enqueued.group(1), max_digits=12) if enqueued else None
    if value is None:
        return None
    pg = _PROGRESS_PG.search(data)
    return (pg.group(1) or "") if pg else "", value


def ranks_behind(timeouts: Iterable[Match], progress: Iterable[Match],
                 reporter: Callable[[Match], int | None]) -> Match | None:
    """Ranks whose own progress line says they never enqueued the collective others timed out in.

    The timed-out sequence number is the highest one a watchdog timeout reports in a process group;
    a rank whose `last enqueued work` in that group is below it never issued the collective. Where
    one side gives no group id, the line counts for the group when the log shows only one; two
    different ids are never compared. Nothing is inferred from silence: only ranks that printed
    their own progress are named.
    """
    timed_out: dict[str, int] = {}
    for m in timeouts:
        seq = bounded_int(m.groups.get("code"), max_digits=12)
        if seq is not None:
            pg = m.groups.get("pg", "")
            timed_out[pg] = max(seq, timed_out.get(pg, 0))
    if not timed_out:
        return None
    behind: dict[int, Match] = {}
    for m in progress:
        found, rank = _progress_of(m), reporter(m)
        if found is None or rank is None:
            continue
        pg, enqueued = found
        seq = timed_out.get(pg)
        if seq is None and len(timed_out) == 1 and (not pg or "" in timed_out):
            seq = next(iter(timed_out.values()))  # one group, and one side does not say which
        if seq is not None and enqueued < seq:
            behind.setdefault(rank, m)
    if not behind:
        return None
    first = min(behind.values(), key=lambda m: m.line_no)
    ranks = ", ".join(str(r) for r in sorted(behind))
    return Match(signature=RANKS_BEHIND, line_no=first.line_no, text=first.text, groups={"ranks": ranks},
                 context=first.context)


def _fault_address(text: str) -> str | None:
    found = _FAULT_ADDRESS.search(utf8(text))
    address = found.group(1) if found else None
    return address.lower().replace("_", "") if address else None


def recurring_app_xid(hits: Iterable[Match]) -> Match | None:
    """An Xid 13/31 hit re-labelled as a GPU fault when its GPU faulted under several processes, or as
    the application's deterministic fault when every one of those was an Xid 31 at one address."""
    pids: dict[str, set[int]] = {}
    first: dict[str, Match] = {}
    addresses: dict[str, set[str | None]] = {}
    for m in hits:
        pci = m.groups.get("pci")
        if m.signature.id not in _APP_XIDS or not pci:
            continue
        found = _PID.search(utf8(m.text))
        pid = bounded_int(found.group(1), max_digits=MAX_RANK_DIGITS) if found else None
        if pid is None:
            continue
        key = pci.lower()
        pids.setdefault(key, set()).add(pid)
        first.setdefault(key, m)
        seen = addresses.setdefault(key, set())
        if len(seen) < 2:  # one address or several: nothing more to learn, and memory stays bounded
            seen.add(_fault_address(m.text) if m.signature.id == "xid-31" else None)
    worst = max(pids, key=lambda k: (len(pids[k]), -first[k].line_no), default=None)
    if worst is None or len(pids[worst]) < RECURRING_XID_PROCESSES:
        return None
    m = first[worst]
    same = addresses[worst]
    signature = SAME_ADDRESS_XID31 if len(same) == 1 and None not in same else RECURRING_XID
    return Match(signature=signature, line_no=m.line_no, text=m.text, groups=dict(m.groups), context=m.context)


def collective_mismatch(timeouts: Iterable[Match], signature: Signature,
                        reporter: Callable[[Match], int | None]) -> Match | None:
    """Timeouts with one sequence number in one process group but different operations or sizes:
    the ranks ran different collectives, an application bug. The minority ranks are named.

    Without a process-group id (older PyTorch) all timeouts are taken as one group: a log of one
    job rarely times out in two groups at the same sequence number. Without a sequence number (older
    still) nothing says the timeouts were the same collective, so they prove no mismatch.
    """
    groups: dict[tuple[str, str], dict[tuple[str, str], list[Match]]] = {}
    for m in timeouts:
        g = m.groups
        if not g.get("code"):
            continue
        variant = (g.get("op", ""), g.get("numel", ""))
        groups.setdefault((g.get("pg", ""), g.get("code", "")), {}).setdefault(variant, []).append(m)
    for variants in groups.values():
        if len(variants) < 2:
            continue
        odd = min(variants.values(), key=lambda ms: (len(ms), ms[0].line_no))
        ranks = sorted({r for r in (reporter(m) for m in odd) if r is not None})
        first = odd[0]
        extra = {"ranks": ", ".join(map(str, ranks))} if ranks else {}
        return dataclasses.replace(first, signature=signature, groups={**first.groups, **extra})
    return None


_LAUNCHER_EXITS = frozenset({"elastic-worker-failed", "elastic-worker-exit-status", "torchrun-exit-sigkill",
                             "native-segfault", "bus-error-exit", "lightning-child-sigkill",
                             "lightning-child-terminated"})


def single_node_local_rank(hits: Iterable[Match]) -> int | None:
    """The local rank torchrun (`failed (exitcode: N) local_rank: L`) or Lightning's launcher
    (`[rank: L] Child process … terminated`) reports as failed, when the log shows one host at most:
    on a single node the local rank is the global rank. (DeepSpeed's exit line quotes the last
    spawned child's `--local_rank`, not the dead one's: not read.)"""
    for m in sorted(hits, key=lambda m: m.line_no):
        if m.signature.id in _LAUNCHER_EXITS:
            local = bounded_int(m.groups.get("detail"), max_digits=MAX_RANK_DIGITS)
            if local is not None:
                return local
    return None


def driver_hang(stuck: list[Match], driver_frames: list[int]) -> Match | None:
    """A D-state task report followed, within a few lines, by a frame in the NVIDIA driver."""
    for m in stuck:
        if any(0 < line - m.line_no <= DRIVER_FRAME_SPAN for line in driver_frames):
            return Match(signature=DRIVER_HANG, line_no=m.line_no, text=m.text, groups=dict(m.groups),
                         context=m.context)
    return None


# Megatron-LM's rerun state machine prints its final verdict from the rank's *new* GPU; the GPU it
# convicts is the one it named as suspect before (megatron-rerun-suspect, in frameworks.toml).
_PERSISTENT_ID = "megatron-rerun-persistent-error"
RERUN_SUSPECT_ID = "megatron-rerun-suspect"
PERSISTENT_ON_SUSPECT = Signature(
    id="megatron-persistent-error-on-suspect", family="megatron", category=Category.GPU_HARDWARE,
    culprit_kind=CulpritKind.GPU, precedence=31, pattern=r"Possible persistent error",
    literals=("Possible persistent error",), restart=True, drain=True, settles=False,
    source=("NVIDIA Megatron-LM, megatron/core/rerun_state_machine.py (core_v0.10.0 to core_v0.19.0): "
            "RerunDiagnostic.PERSISTENT_ERROR, 'could be reproduced on the same GPU, but not on a different "
            "GPU', on the GPU stored as suspicious_node / suspicious_device when the first rerun reproduced it"),
    explanation=("Megatron's rerun state machine convicted a GPU: it reproduced an unexpected result (NaN, "
                 "Inf, a spike) on its own, and a different GPU did not. That GPU computes wrongly (silent "
                 "data corruption): drain its node for diagnostics and resume the job from its last "
                 "checkpoint elsewhere."))


ELSEWHERE_FROM_SUSPECT = Signature(
    id="megatron-rerun-elsewhere-from-suspect", family="megatron", category=Category.GPU_HARDWARE,
    culprit_kind=CulpritKind.GPU, precedence=31, pattern=r"Please resume the job from the",
    literals=("Please resume the job from the",), restart=True, drain=False, exclude=True, settles=False,
    source=("NVIDIA Megatron-LM, megatron/core/rerun_state_machine.py (core_v0.10.0 to core_v0.19.0): "
            "EXIT_CODE_RESUME_TO_DISAMBIGUATE (16) after the first rerun reproduced the result on the GPU "
            "stored as suspicious_node / suspicious_device; the second rerun is valid only on another one"),
    explanation=("Megatron's rerun state machine reproduced an unexpected result (NaN, Inf, a spike) on one GPU "
                 "and exited to be resumed on a different one, the only way to tell a faulty GPU from a real "
                 "result: restart the job away from that GPU's node, which stays in service; the next run's "
                 "verdict says whether the GPU or the model was at fault."))
_ON_SUSPECT = {_PERSISTENT_ID: PERSISTENT_ON_SUSPECT, "megatron-rerun-elsewhere": ELSEWHERE_FROM_SUSPECT}


def megatron_on_suspect(hits: Iterable[Match], suspects: Iterable[Match]) -> Match | None:
    """Megatron's last verdict line about a suspect GPU (persistent error: drain it; exit to be resumed
    elsewhere: keep the job away from it), re-labelled to name the host it last named as suspect
    before that line; None without both (the verdict's own line names the rank's new host, or none)."""
    verdicts = [m for m in hits if m.signature.id in _ON_SUSPECT]
    if not verdicts:
        return None
    verdict = max(verdicts, key=lambda m: m.line_no)
    before = [m for m in suspects if m.line_no < verdict.line_no]
    if not before:
        return None
    # Each wording of the suspect line names its host in one group: `host`, or `peer` for the second.
    named = max(before, key=lambda m: m.line_no).groups
    host = named.get("host") or named.get("peer")
    if not host:
        return None
    return Match(signature=_ON_SUSPECT[verdict.signature.id], line_no=verdict.line_no, text=verdict.text,
                 groups={"host": host}, context=LineContext())
