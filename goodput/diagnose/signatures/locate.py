"""Joining hosts, ranks, tasks and GPUs across lines of one log.

A fault line rarely names everything: a Python exception knows its rank but not its host, an
`srun: error:` line knows host and task, a torchrun failure summary spreads host, rank and exit
code over consecutive lines, the kernel's fallen-off-the-bus banner names the PCI id two lines
before the message, a pasted terminal session names its host once in the prompt. This collector
remembers those facts (bounded, so a hostile log cannot grow it without limit) and fills them
into the hits that lack them. Numbers read from a line are bounded (`bounded_int`): an absurd rank
or communicator size is ignored, never converted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from goodput.diagnose.signatures.hostshape import aws_ip_name, bare_address, host_shaped, ipv4
from goodput.diagnose.signatures.model import MAX_RANK_DIGITS, LineContext, Match
from goodput.untrusted_text import LinearRegex, bounded_int

MAX_ENTRIES = 10_000
# `0000:bb:00.0` is 12 characters; NCCL's compact form is shorter. Longer is not a bus id.
MAX_BUS_ID_CHARS = 16
# torchrun prints host, rank and exitcode within a few lines of each other.
SUMMARY_SPAN = 4
BANNER_SPAN = 4
# torchrun's "Root Cause (first observed failure):" heading, then `[0]:`, time, host, rank.
ROOT_CAUSE_SPAN = 6
# A node's name on one of its fabrics (`jean-zay-iam37-ib0`, `nid001-hsn0`) is the node's name plus
# the interface; Slurm, and a drain, know the node by the plain name.
_INTERFACE_SUFFIX = LinearRegex(r"-(?:ib|hsn|ipoib|opa)\d{0,2}")


# Locators that state an address and the host it belongs to.
_ADDRESS_PAIRS = frozenset({"nccl-bootstrap-address", "kubectl-pod-node"})


def node_of(host: str | None) -> str | None:
    """The node a host name stands for: the name without a fabric interface suffix."""
    if not host:
        return host
    base, dash, suffix = host.rpartition("-")
    return base if dash and base and _INTERFACE_SUFFIX.fullmatch(("-" + suffix).encode()) else host


def nccl_bus_id_to_pci(bus_id: str) -> str:
    """NCCL prints `0000:bb:00.0` with the punctuation removed and leading zeros trimmed (`bb000`)."""
    digits = bus_id.lower().rjust(9, "0")
    return f"{digits[:-5][-4:].rjust(4, '0')}:{digits[-5:-3]}:{digits[-3:-1]}.{digits[-1]}"


class Locator:
    def __init__(self) -> None:
        self.task_host: dict[int, str] = {}
        self.rank_host: dict[int, str] = {}
        self._summary_host: tuple[str, int] | None = None
        self._summary_rank: tuple[int, str | None, int] | None = None
        self._banner_pci: tuple[str, str | None, int] | None = None
        self._prompt_host: str | None = None
        self._root_cause_at: int | None = None
        # The rank (and host) torchrun's summary names as the first observed failure.
        self.root_cause: tuple[int, str | None] | None = None
        # rank -> (communicator size, host, PCI id) from NCCL init lines; the biggest communicator
        # is the world, whose ranks are global ranks (sub-communicators number their own).
        self._nccl: dict[int, tuple[int, str, str]] = {}
        self._world = 0
        # Every host the log's hits name or were printed on (bounded): is this a one-node log?
        self.hosts: set[str] = set()
        # address -> name, from pairs the log itself states (NCCL's bootstrap interface on a line its
        # host printed, `kubectl describe pod`'s `Node: name/address`); bounded.
        self.names: dict[str, str] = {}
        self._learners = self._by_signature()

    def observe(self, match: Match) -> Match:
        """Learn from one hit (in line order) and return it with what is known filled in."""
        if match.host and (match.host in self.hosts or len(self.hosts) < MAX_ENTRIES):
            self.hosts.add(match.host)
        learn = self._learners.get(match.signature.id)
        if learn is not None:
            learn(match)
            return match
        g = match.groups
        line = match.line_no
        host = match.host
        task = bounded_int(g.get("task"), max_digits=MAX_RANK_DIGITS)
        if host and task is not None:
            self._remember(self.task_host, task, host)
        if host and match.context.rank is not None:
            self._remember(self.rank_host, match.context.rank, host)

        updates: dict[str, str] = {}
        if not host and self._prompt_host:
            updates["host"] = self._prompt_host
        if (self._summary_rank and match.rank is None and "exitcode" in match.text
                and line - self._summary_rank[2] <= SUMMARY_SPAN):
            rank, summary_host, _ = self._summary_rank
            updates["rank"] = str(rank)
            if summary_host and not host:
                updates["host"] = summary_host
        if ("pci" not in g and match.signature.category.startswith("gpu") and self._banner_pci
                and line - self._banner_pci[2] <= BANNER_SPAN and self._banner_pci[1] == match.context.host):
            updates["pci"] = self._banner_pci[0]
        if not updates:
            return match
        return dataclasses.replace(match, groups={**g, **updates})

    def _by_signature(self) -> dict[str, Callable[[Match], None]]:
        """The hits that only teach the layout (who is where), by signature id."""
        learners: dict[str, Callable[[Match], None]] = {
            "torchrun-summary-host": self._summary_host_line, "shell-prompt": self._prompt_line,
            "shell-prompt-host": self._prompt_line,
            "torchrun-root-cause": self._root_cause_line, "torchrun-summary-rank": self._summary_rank_line,
            "nccl-init-rank": self._nccl_init_line, "gpu-pci-banner": self._banner_line}
        learners.update(dict.fromkeys(_ADDRESS_PAIRS, self._address_pair_line))
        return learners

    def _summary_host_line(self, match: Match) -> None:
        self._summary_host = (match.groups["host"], match.line_no)

    def _prompt_line(self, match: Match) -> None:
        self._prompt_host = match.groups["host"]

    def _address_pair_line(self, match: Match) -> None:
        g = match.groups
        name = g.get("host") or match.context.host
        address = g.get("address", "")
        if name and ipv4(address) and not ipv4(name) and (address in self.names or len(self.names) < MAX_ENTRIES):
            self.names.setdefault(address, name)
        if match.signature.id == "kubectl-pod-node" and name:
            self._prompt_host = name  # what follows describes a pod on that node

    def _root_cause_line(self, match: Match) -> None:
        self._root_cause_at = match.line_no

    def _summary_rank_line(self, match: Match) -> None:
        rank = bounded_int(match.groups.get("rank"), max_digits=MAX_RANK_DIGITS)
        if rank is None:
            return
        line = match.line_no
        host = None
        if self._summary_host and line - self._summary_host[1] <= SUMMARY_SPAN:
            host = self._summary_host[0]
            self._remember(self.rank_host, rank, host)
        self._summary_rank = (rank, host, line)
        if self._root_cause_at is not None and line - self._root_cause_at <= ROOT_CAUSE_SPAN:
            self.root_cause = (rank, host)
            self._root_cause_at = None

    def _nccl_init_line(self, match: Match) -> None:
        g = match.groups
        host = match.host
        rank = bounded_int(g.get("rank"), max_digits=MAX_RANK_DIGITS)
        size = bounded_int(g.get("code"), max_digits=MAX_RANK_DIGITS)
        pci = g.get("pci", "")
        if host and rank is not None and size is not None and len(pci) <= MAX_BUS_ID_CHARS:
            if size >= self._nccl.get(rank, (0, "", ""))[0] and (rank in self._nccl or
                                                                  len(self._nccl) < MAX_ENTRIES):
                self._nccl[rank] = (size, host, nccl_bus_id_to_pci(pci))
            self._world = max(self._world, size)

    def _banner_line(self, match: Match) -> None:
        self._banner_pci = (match.groups["pci"], match.context.host, match.line_no)

    def host_of(self, match: Match) -> str | None:
        """The node that printed (or is named by) a hit, joined through ranks and tasks if need be."""
        if match.host:
            return self.name_of(match.host)
        ctx: LineContext = match.context
        named_rank = bounded_int(match.groups.get("rank"), max_digits=MAX_RANK_DIGITS)
        if named_rank is not None and named_rank in self.rank_host:
            return self.name_of(self.rank_host[named_rank])
        if ctx.rank is not None and ctx.rank in self.rank_host:
            return self.name_of(self.rank_host[ctx.rank])
        if ctx.task is not None and ctx.task in self.task_host:
            return self.name_of(self.task_host[ctx.task])
        world = self._world_entry(match)
        return self.name_of(world[1]) if world else None

    def node_of_rank(self, rank: int) -> str | None:
        return self.name_of(self.rank_host.get(rank))

    def name_of(self, host: str | None) -> str | None:
        """The node a host (or peer) stands for: an address becomes the name the log pairs it with
        (or EC2's `ip-a-b-c-d` name when the log shows a host by that name), an interface suffix goes."""
        if not host:
            return host
        address = bare_address(host)
        if ipv4(address):
            named = self.names.get(address)
            if named is not None:
                return node_of(named)
            aws = aws_ip_name(address)
            if aws is not None:
                for known in self.hosts:
                    if known == aws or (known.startswith(aws + ".") and host_shaped(known)):
                        return known
            return address
        return node_of(host)

    def gpu_of(self, match: Match) -> str | None:
        """The PCI id of the GPU behind a rank, when NCCL's init lines told us."""
        world = self._world_entry(match)
        return world[2] if world and (not match.host or match.host == world[1]) else None

    def _world_entry(self, match: Match) -> tuple[int, str, str] | None:
        rank = match.rank
        entry = self._nccl.get(rank) if rank is not None else None
        return entry if entry and entry[0] == self._world else None

    @staticmethod
    def _remember(table: dict[int, str], key: int, host: str) -> None:
        if key in table or len(table) < MAX_ENTRIES:
            table.setdefault(key, host)
