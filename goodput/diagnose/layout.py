"""Where each rank of a job ran: the host ↔ rank ↔ GPU layout goodput's Slurm prolog records.

A training log often names only a rank (`[rank5]: ... uncorrectable ECC error`) or a GPU's PCI id,
not the host: the job's output file is shared by every node, so the line alone cannot say which
node to drain. goodput's prolog (deploy/slurm/) records, on every node of every job, the node's
place in the job's node list and the GPUs Slurm gave the job there (with PCI bus id, UUID and
serial from nvidia-smi). This module turns those records into a host and a GPU for a rank or a
GPU id. Pure: the records are read by a `LayoutSource` (the push server's file store in
production).

The rank → host mapping assumes one rank per allocated GPU, handed out node by node in the job's
node order (block distribution): global rank r runs on node r // G as local rank r % G, on the
node's (r % G)-th allocated GPU, where G is the number of GPUs per node. That is what `srun` with
one task per GPU gives (rank = SLURM_PROCID), and torchrun when its node rank is Slurm's node index
(`--node-rank=$SLURM_NODEID`); torchrun's c10d rendezvous numbers nodes in the order they join,
which no prolog can know. So the layout is the last resort: a host the log itself ties to the rank
(NCCL's init lines, torchrun's failure summary, `srun -l` prefixes) always wins, and the layout is
read only when the evidence names ranks or GPUs and no host at all. It is applied only when that
can hold: every node of the allocation reported, each with the same non-zero number of GPUs, and
the layout's node list is exactly the allocation Slurm records for the job (records describe
nodes, and a node is believed only when Slurm says the job has it, as for any other evidence).
A PCI bus id names a host only when exactly one node of the job has a GPU at that address
(identical nodes usually share addresses); a GPU UUID is unique everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import Field

from goodput.models import Anomaly, Cluster, Frozen, JobId, NodeName
from goodput.slurm.hostlist import HostlistError, expand_hostlist

MAX_GPUS_PER_NODE = 64
MAX_NODELIST_CHARS = 16384
MAX_CHECK_DETAIL = 300
MAX_NOTED_PLACES = 4
# nvidia-smi prints `00000000:3B:00.0`; Xid lines `PCI:0000:3b:00`; both, and forms without the
# domain, name the same GPU.
PCI_BUS_ID = r"^(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?$"
_PCI = re.compile(r"(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?")
GPU_UUID = r"^(?:GPU|MIG)-[0-9A-Fa-f-]{8,64}$"
GPU_SERIAL = r"^[A-Za-z0-9._-]{1,64}$"


class GpuSlot(Frozen):
    """One GPU Slurm allocated to the job on a node: its index, and who it is, when nvidia-smi said."""

    index: int = Field(ge=0, le=1023)
    pci_bus_id: str | None = Field(default=None, pattern=PCI_BUS_ID)
    uuid: str | None = Field(default=None, pattern=GPU_UUID)
    serial: str | None = Field(default=None, pattern=GPU_SERIAL)

    def ref(self, node: str) -> str:
        """The id a GPU culprit carries: as a GPU probe names it (UUID, else PCI id, else node:gpuN)."""
        return self.uuid or self.pci_bus_id or f"{node}:gpu{self.index}"


class NodeCheck(Frozen):
    """The prolog's (or epilog's) fast node check: nvidia-smi answering in time, the GPUs there."""

    status: Literal["ok", "failed", "skipped"]
    detail: str = Field(default="", max_length=MAX_CHECK_DETAIL, pattern=r"^[\x20-\x7e]*$")


class NodeLayout(Frozen):
    """One node of one job attempt, as its prolog reported it (and its epilog, once the job ended)."""

    job_id: JobId
    attempt: int = Field(default=0, ge=0)
    node: NodeName
    node_index: int = Field(ge=0)
    node_count: int = Field(ge=1)
    nodelist: str = Field(max_length=MAX_NODELIST_CHARS)
    # In Slurm's allocation order: local rank i uses gpus[i] (CUDA_VISIBLE_DEVICES order).
    gpus: tuple[GpuSlot, ...] = Field(default=(), max_length=MAX_GPUS_PER_NODE)
    check: NodeCheck
    recorded_at: datetime
    ended_at: datetime | None = None
    end_check: NodeCheck | None = None


class JobLayout(Frozen):
    """Every node record of one job attempt that reached goodput."""

    cluster: Cluster
    job_id: JobId
    attempt: int = Field(default=0, ge=0)
    nodes: tuple[NodeLayout, ...] = ()

    def by_index(self) -> dict[int, NodeLayout]:
        """The job's nodes by their index in the allocation (SLURM_NODEID)."""
        return {n.node_index: n for n in self.nodes}

    def gpus_per_node(self) -> int | None:
        """G of the block mapping: the same for every node, and every node reported; else None."""
        counts = {n.node_count for n in self.nodes}
        if len(counts) != 1 or set(self.by_index()) != set(range(counts.pop())):
            return None
        gpus = {len(n.gpus) for n in self.nodes}
        return gpus.pop() if len(gpus) == 1 and 0 not in gpus else None


class LayoutSource(Protocol):
    """Where attribution reads layouts from; None when no record of that job attempt is known."""

    def job_layout(self, cluster: str, job_id: str, attempt: int) -> JobLayout | None:
        """The layout recorded for one job attempt, or None when none is known."""
        ...


def job_layout(cluster: str, job_id: str, attempt: int, nodes: Iterable[NodeLayout]) -> JobLayout:
    """The layout of one attempt from its node records (the newest record of each node wins)."""
    newest: dict[str, NodeLayout] = {}
    for record in nodes:
        if record.job_id != job_id or record.attempt != attempt:
            continue
        kept = newest.get(record.node)
        if kept is None or record.recorded_at >= kept.recorded_at:
            newest[record.node] = record
    ordered = sorted(newest.values(), key=lambda n: (n.node_index, n.node))
    return JobLayout(cluster=cluster, job_id=job_id, attempt=attempt, nodes=tuple(ordered))


def node_place(nodelist: str, node: str) -> tuple[int, int]:
    """(index of `node` in the job's node list, number of nodes): ValueError when it is not there."""
    try:
        names = expand_hostlist(nodelist)
    except HostlistError as err:
        raise ValueError(f"node list {nodelist[:60]!r}: {err}") from err
    if node not in names:
        raise ValueError(f"node {node!r} is not in the job's node list {nodelist[:60]!r}")
    return names.index(node), len(names)


def pci_key(text: str) -> tuple[int, int, int, int | None] | None:
    """(domain, bus, device, function or None) of a PCI address in any of its usual spellings."""
    found = _PCI.fullmatch(text.strip()) if len(text) <= 32 else None
    if found is None:
        return None
    domain, bus, device, function = found.groups()
    return (int(domain or "0", 16), int(bus, 16), int(device, 16), int(function) if function else None)


def same_gpu(ref: str, slot: GpuSlot) -> bool:
    """Whether a log's GPU reference (a UUID or a PCI bus id, with or without its domain or function)
    names this slot."""
    if slot.uuid is not None and ref == slot.uuid:
        return True
    wanted, have = pci_key(ref), pci_key(slot.pci_bus_id) if slot.pci_bus_id else None
    if wanted is None or have is None or wanted[:3] != have[:3]:
        return False
    return wanted[3] is None or have[3] is None or wanted[3] == have[3]


class Place(Frozen):
    """Where a rank (or a GPU) of the job was: a host, and the GPU when known."""

    node: str
    gpu: GpuSlot | None = None
    how: str

    @property
    def gpu_ref(self) -> str | None:
        """The GPU as a culprit names it (on its host), when the place knows the GPU."""
        return self.gpu.ref(self.node) if self.gpu is not None else None


def unusable(layout: JobLayout, allocation: Sequence[str]) -> str | None:
    """Why this layout must not be believed for a job Slurm says runs on `allocation`; None if it may."""
    if not layout.nodes:
        return "no layout records"
    if not allocation:
        return "Slurm lists no nodes for the job"
    lists = {n.nodelist for n in layout.nodes}
    if len(lists) != 1:
        return "its node records disagree about the job's nodes"
    try:
        names = expand_hostlist(lists.pop())
    except HostlistError:
        return "its node list cannot be read"
    if set(names) != set(allocation) or not {n.node for n in layout.nodes} <= set(allocation):
        return "its nodes are not the job's allocation as Slurm records it"
    return None


def rank_place(layout: JobLayout, rank: int) -> Place | None:
    """The host and GPU of global rank `rank` under the block mapping, when the layout allows it."""
    per_node = layout.gpus_per_node()
    if per_node is None or rank < 0:
        return None
    index, local = divmod(rank, per_node)
    node = layout.by_index().get(index)
    if node is None:
        return None
    return Place(node=node.node, gpu=node.gpus[local],
                 how=f"rank {rank} is local rank {local} of node {index} ({per_node} GPUs per node)")


def gpu_place(layout: JobLayout, ref: str) -> Place | None:
    """The one host of the job with this GPU (UUID or PCI id); None when none or several have it."""
    found = [(n, g) for n in layout.nodes for g in n.gpus if same_gpu(ref, g)]
    if len(found) != 1:
        return None
    node, gpu = found[0]
    return Place(node=node.node, gpu=gpu, how=f"the job's only GPU {ref[:64]}")


class Located(Frozen):
    """What the layout adds to an attribution whose evidence names ranks or GPUs but no host."""

    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    note: str = ""


def wants_layout(anomalies: Sequence[Anomaly]) -> bool:
    """Whether any evidence names a rank or a GPU without a host (only then is a layout worth reading)."""
    return any((a.ranks or a.gpus) and not a.nodes for a in anomalies)


def locate(layout: JobLayout, allocation: Sequence[str], *, ranks: Sequence[int] = (),
           gpus: Sequence[str] = ()) -> Located:
    """Hosts (and GPUs) for the ranks and GPU ids evidence names, from a layout Slurm vouches for."""
    why_not = unusable(layout, allocation)
    if why_not is not None:
        return Located(note=f"the job's layout from goodput's prolog was not used: {why_not}")
    places: list[Place] = []
    for rank in dict.fromkeys(ranks):
        place = rank_place(layout, rank)
        if place is not None:
            places.append(place)
    for ref in dict.fromkeys(gpus):
        place = gpu_place(layout, ref)
        if place is not None:
            places.append(place.model_copy(update={"gpu": None}))  # that GPU is already a culprit
    if not places:
        return Located(note="the job's layout from goodput's prolog does not place the ranks or GPUs named")
    checks = {n.node: n for n in layout.nodes}
    said = []
    for place in places[:MAX_NOTED_PLACES]:
        gpu = f" GPU {place.gpu.index} ({place.gpu_ref})" if place.gpu is not None else ""
        said.append(f"{place.node}{gpu}: {place.how}{_failed_check(checks[place.node])}")
    note = "by the job's layout from goodput's prolog (one rank per GPU, node by node): " + "; ".join(said)
    return Located(nodes=tuple(dict.fromkeys(p.node for p in places)),
                   gpus=tuple(dict.fromkeys(r for r in (p.gpu_ref for p in places) if r is not None)), note=note)


def _failed_check(node: NodeLayout) -> str:
    failed = [(when, c) for when, c in (("prolog", node.check), ("epilog", node.end_check))
              if c is not None and c.status == "failed"]
    return "".join(f" (its {when} node check failed: {c.detail})" for when, c in failed)
