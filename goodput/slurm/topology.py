"""Switch membership from Slurm's topology (`scontrol show topology`), for the drain breaker.

Nodes under one leaf switch that fail together are more often the switch than that many bad nodes,
so the breaker limits drains per switch. A site that runs TopologyPlugin=topology/tree already
told Slurm which nodes hang under which switch (topology.conf); reading it from Slurm saves the
site a second copy of the map that drifts. Slurm 22.05 to 26.05 print one switch a line:

    SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[1-4]
    SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-8] Switches=s[1-2]

Only leaf switches (level 0) matter: a higher switch spans its leaves, and limiting it would limit
the whole fabric. Pure: the CLI backend runs the command and hands the text here. Bounded: the
text, the number of switches and each hostlist, so a huge or garbled answer is an error, not a
stall.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.scheduler import PermanentSchedulerError, SlurmSwitch
from goodput.slurm.hostlist import HostlistError, hostlist_size

MAX_TOPOLOGY_CHARS = 4 * 1024 * 1024
MAX_SWITCHES = 10_000


class TopologyError(PermanentSchedulerError):
    """`scontrol show topology` printed something that is not a topology goodput can use."""


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def parse_topology(text: str) -> tuple[SlurmSwitch, ...]:
    """Every switch `scontrol show topology` printed, in order; () when Slurm has no topology
    (topology/none prints nothing, or a line without `SwitchName=`)."""
    if len(text) > MAX_TOPOLOGY_CHARS:
        raise TopologyError(f"topology output is over {MAX_TOPOLOGY_CHARS} characters")
    switches: list[SlurmSwitch] = []
    for line in text.splitlines():
        fields = _fields(line)
        name = fields.get("SwitchName")
        if not name:
            continue
        if len(switches) >= MAX_SWITCHES:
            raise TopologyError(f"more than {MAX_SWITCHES} switches")
        nodes = fields.get("Nodes", "")
        if nodes in ("(null)", "(none)"):
            nodes = ""
        level = fields.get("Level", "0")
        try:
            if nodes:
                hostlist_size(nodes)
            switch = SlurmSwitch(name=name, level=int(level) if level.isdigit() else 0, nodes=nodes)
        except (HostlistError, ValueError) as exc:
            raise TopologyError(f"switch {name[:128]!r}: {exc}") from exc
        switches.append(switch)
    return tuple(switches)


def leaf_switches(switches: Sequence[SlurmSwitch]) -> tuple[SlurmSwitch, ...]:
    """The switches nodes hang under directly (level 0, with nodes)."""
    return tuple(s for s in switches if s.level == 0 and s.nodes)
