"""Node-platform faults that only several lines, or a line next to a stall, reveal.

One process crashing inside NVIDIA's user-mode driver (`libcuda.so`) is a crash like any other: a
bad pointer handed to a CUDA call does it. Several processes crashing at the *same instruction* of
that library on one node say the driver install of that node is broken, whatever the programs do.
The kernel's segfault report gives the faulting instruction pointer and the base of the mapping it
lies in; ASLR moves the base per process, so the offset (ip - base) is what identifies the
instruction. Separately, `lspci -vvv` showing ACS enabled on PCI bridges says nothing alone (many
healthy nodes have it); next to a stall it is NCCL's documented cause of peer-to-peer traffic that
hangs, a node setting that an unchanged restart on that node repeats. And an Xid whose immediate
action in NVIDIA's catalogue is RESTART_APP but whose investigatory action is CONTACT_SUPPORT is the
job's the first time; seen again on the same GPU under another process (the restart did not clear
it), the GPU needs an operator. Last, a GPU fault on a node that `nvidia-smi -q` says has one GPU
is that GPU, even where the fault line names none.

`NodePlatform` watches the hits of one log (bounded memory) and `synthesize` returns hits of the
synthetic signatures below, which then compete with the log's own by the usual rules.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, Match, Signature
from goodput.diagnose.signatures.vendor import Decision, load_table
from goodput.models import Category, CulpritKind
from goodput.untrusted_text import LinearRegex, bounded_int

# Processes crashing at one instruction of the driver before the node's driver is suspected.
RECURRING_PROCESSES = 3
# Distinct (host, library, offset) keys remembered; a log with more is noise, not a pattern.
MAX_KEYS = 64
# Processes on one GPU reporting a restart-then-support Xid: the second is the restart's failure.
RECURRING_SUPPORT_PROCESSES = 2
SEGFAULT_ID = "kernel-segfault-libcuda"
ACS_ID = "pcie-acs-enabled"
ATTACHED_ID = "smi-q-attached-gpus"
HEADER_ID = "smi-q-gpu-header"
# `comm[pid]: segfault at ADDR ip IP sp SP error N ... in LIB[BASE+SIZE]` (all hex, bounded).
_SEGFAULT = LinearRegex(r"\[(\d{1,9})\]: segfault at [0-9A-Fa-f]{1,16} ip ([0-9A-Fa-f]{1,16}) sp [0-9A-Fa-f]{1,16} "
                        r"error [0-9A-Fa-f]{1,4}[^\[]{0,40} in (libcuda\.so[\w.]{0,32})\[([0-9A-Fa-f]{1,16})\+")

_PID = LinearRegex(r"\bpid=(\d{1,9})\b")

RECURRING_SUPPORT_XID = Signature(
    id="xid-recurring-contact-support", family="xid", category=Category.GPU_HARDWARE, culprit_kind=CulpritKind.GPU,
    precedence=100, pattern=r"\A\z", literals=("xid-recurring-contact-support",), restart=True, drain=True,
    source=("NVIDIA, Xid Errors: Analyzing Xid Errors with the Xid Catalog, Table 1 Xids: Resolution Bucket "
            "(Immediate Action) RESTART_APP with Resolution Bucket (Investigatory Action) CONTACT_SUPPORT"),
    explanation=("An Xid that NVIDIA's catalogue answers with restarting the application, and with support if it "
                 "persists, came back on the same GPU under another process: restarting did not clear it, so the "
                 "GPU needs an operator (a reset, diagnostics, or support). Drain the node, rerun elsewhere."))


@cache
def support_xid_ids() -> frozenset[str]:
    """Signature ids of the Xids whose immediate bucket is the job's and whose investigation is support."""
    table = load_table()
    return frozenset(f"xid-{r.code}" for r in table.rows
                     if table.bucket(r.immediate).decision is Decision.JOB and r.investigatory == "CONTACT_SUPPORT")


LIBCUDA_RECURRING = Signature(
    id="libcuda-segfault-recurring", family="gpu", category=Category.NODE_FAILURE, culprit_kind=CulpritKind.NODE,
    precedence=92, pattern=r"\A\z", literals=("libcuda-segfault-recurring",), restart=True, drain=True,
    source=("Linux kernel, arch/x86/mm/fault.c show_signal_msg (the segfault report: faulting instruction pointer "
            "and the mapping it lies in, with the mapping's base); NVIDIA driver README, Installed Components "
            "(libcuda.so, the CUDA driver library, is part of the NVIDIA driver)"),
    explanation=(f"{RECURRING_PROCESSES} or more processes crashed at the same instruction of NVIDIA's user-mode "
                 "driver (libcuda) on this node: one program's bad pointer does not make different processes fault "
                 "at one offset of the driver, so the node's driver install (or the hardware under it) is broken. "
                 "Drain the node for a driver reinstall or reboot, rerun elsewhere."))

ACS_STALL = Signature(
    id="p2p-blocked-by-acs", family="gpu", category=Category.HANG, culprit_kind=CulpritKind.NODE, precedence=90,
    pattern=r"\A\z", literals=("p2p-blocked-by-acs",), restart=True, drain=True, settles=False,
    source=("NVIDIA, NCCL User Guide, Troubleshooting, PCI Access Control Services (ACS): ACS redirects "
            "peer-to-peer PCI traffic to the root complex, causing a severe slowdown or a hang; lspci -vvv "
            "showing SrcValid+ in ACSCtl says ACS may be enabled; disable it for GPU Direct on bare metal"),
    explanation=("The job stalled on a node whose PCI bridges have Access Control Services enabled (lspci: ACSCtl "
                 "SrcValid+). NCCL documents that ACS redirects GPU peer-to-peer traffic through the CPU root "
                 "complex and can hang it: a setting of the node (BIOS or kernel), so a restart on it hangs again. "
                 "Drain the node until ACS is disabled (or the IOMMU set to passthrough), rerun elsewhere."))


class NodePlatform:
    """Driver crashes and PCI settings of one log, collected in line order."""

    def __init__(self) -> None:
        self._crashes: dict[tuple[str | None, str, int], set[int]] = {}
        self._first: dict[tuple[str | None, str, int], Match] = {}
        self._acs: Match | None = None
        self._recurring: Match | None = None
        self._support: dict[str, set[int]] = {}
        self._support_first: dict[str, Match] = {}
        self._support_recurring: Match | None = None
        # nvidia-smi -q: (host, GPU count) of the last report, and the bus ids of its sections.
        self._attached: tuple[str | None, int] | None = None
        self._headers: dict[str, str | None] = {}

    def observe(self, match: Match) -> None:
        sig_id = match.signature.id
        if sig_id == ACS_ID and self._acs is None:
            self._acs = match
        elif sig_id == SEGFAULT_ID and self._recurring is None:
            self._crash(match)
        elif sig_id in support_xid_ids() and self._support_recurring is None:
            self._support_xid(match)
        elif sig_id == ATTACHED_ID:
            count = bounded_int(match.groups.get("code"), max_digits=4)
            self._attached = (match.host, count) if count is not None else None
        elif sig_id == HEADER_ID and len(self._headers) < MAX_KEYS:
            self._headers.setdefault(match.groups.get("pci", ""), match.host)

    def only_gpu(self, host: str | None) -> str | None:
        """The bus id of the one GPU nvidia-smi -q says the node (`host`, or an unnamed one) has."""
        if self._attached is None or self._attached[1] != 1 or len(self._headers) != 1:
            return None
        pci, printed_on = next(iter(self._headers.items()))
        return pci if pci and printed_on == host == self._attached[0] else None

    def _support_xid(self, match: Match) -> None:
        pci = match.groups.get("pci")
        found = _PID.search_text(match.text)
        pid = bounded_int(found.group(1), max_digits=MAX_RANK_DIGITS) if found else None
        if not pci or pid is None:
            return
        key = pci.lower()
        if key not in self._support and len(self._support) >= MAX_KEYS:
            return
        pids = self._support.setdefault(key, set())
        self._support_first.setdefault(key, match)
        pids.add(pid)
        if len(pids) >= RECURRING_SUPPORT_PROCESSES:
            self._support_recurring = dataclasses.replace(self._support_first[key], signature=RECURRING_SUPPORT_XID)

    def _crash(self, match: Match) -> None:
        found = _SEGFAULT.search_text(match.text)
        pid, ip, library, base = (found.group(i) if found else None for i in range(1, 5))
        if pid is None or ip is None or library is None or base is None:
            return
        key = (match.host, library, int(ip, 16) - int(base, 16))
        if key not in self._crashes and len(self._crashes) >= MAX_KEYS:
            return
        pids = self._crashes.setdefault(key, set())
        self._first.setdefault(key, match)
        pids.add(int(pid))
        if len(pids) >= RECURRING_PROCESSES:
            self._recurring = dataclasses.replace(self._first[key], signature=LIBCUDA_RECURRING)

    def synthesize(self, stalled: bool) -> list[Match]:
        """The synthetic hits: a recurring driver crash or support Xid; ACS enabled where the log stalled."""
        found = [m for m in (self._recurring, self._support_recurring) if m is not None]
        if stalled and self._acs is not None:
            found.append(dataclasses.replace(self._acs, signature=ACS_STALL))
        return found
