"""Switch membership from Slurm's topology: the parser (golden text), the CLI backend, the cached
map the breaker reads, and the breaker's switch limit over Slurm's switches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.topology import SwitchMap
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import (
    BreakerPolicy,
    BreakerState,
    DrainRequest,
    TopologyGroup,
    decide,
    with_slurm_switches,
)
from goodput.scheduler import PermanentSchedulerError, SlurmSwitch, TransientSchedulerError
from goodput.slurm.topology import MAX_TOPOLOGY_CHARS, TopologyError, leaf_switches, parse_topology
from tests.unit.slurm_cli_helpers import FIXTURES, ScriptedRunner, fail, ok

LAB = (FIXTURES / "scontrol-topology-22.05.txt").read_text()
TREE = (FIXTURES / "scontrol-topology-tree-22.05.txt").read_text()
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def test_the_labs_topology_is_one_leaf_over_every_node() -> None:
    assert parse_topology(LAB) == (SlurmSwitch(name="lableaf", level=0, nodes="node[1-4]"),)


def test_a_tree_keeps_its_leaves_for_the_breaker_not_the_spine() -> None:
    switches = parse_topology(TREE)
    assert [(s.name, s.level) for s in switches] == [("leaf1", 0), ("leaf2", 0), ("spine", 1)]
    assert [s.name for s in leaf_switches(switches)] == ["leaf1", "leaf2"]


@pytest.mark.parametrize("text", ["", "\n", "scontrol: no topology\n", "NodeName=node1 State=IDLE\n"])
def test_no_topology_is_no_switches(text: str) -> None:
    assert parse_topology(text) == ()


@pytest.mark.parametrize("text", ["SwitchName=s1 Level=0 Nodes=node[3-1]\n",
                                  "SwitchName=s1 Nodes=a[1-99999]b[1-99999]\n",
                                  "SwitchName=" + "x" * 300 + " Nodes=n1\n", "SwitchName=s Nodes=n1\n" * 10_001,
                                  "x" * (MAX_TOPOLOGY_CHARS + 1)])
def test_a_garbled_or_huge_topology_is_a_typed_error(text: str) -> None:
    with pytest.raises(TopologyError):
        parse_topology(text)


async def test_the_cli_backend_reads_scontrol_show_topology() -> None:
    runner = ScriptedRunner({("scontrol", "show", "topology"): ok(TREE)})
    assert [s.name for s in await SlurmCliBackend(runner).topology()] == ["leaf1", "leaf2", "spine"]
    failing = SlurmCliBackend(ScriptedRunner({("scontrol", "show", "topology"): ok("SwitchName=s Nodes=n[")}))
    with pytest.raises(PermanentSchedulerError):
        await failing.topology()


def test_slurms_switches_fill_the_map_only_where_none_is_configured_and_a_limit_is_set() -> None:
    switches = parse_topology(TREE)
    limited = BreakerPolicy(max_drains_per_switch=2)
    assert [g.name for g in with_slurm_switches(limited, switches).switches] == ["leaf1", "leaf2"]
    configured = limited.model_copy(update={"switches": (TopologyGroup(name="mine", nodes="gpu[001-008]"),)})
    assert with_slurm_switches(configured, switches) == configured  # the site's map overrides Slurm's
    assert with_slurm_switches(BreakerPolicy(), switches) == BreakerPolicy()  # no switch limit, no map needed


def test_three_drains_under_one_slurm_switch_trip_its_limit() -> None:
    policy = with_slurm_switches(BreakerPolicy(max_drained_nodes=10, max_drains_per_switch=2), parse_topology(TREE))
    state = BreakerState()
    verdicts = []
    for i, node in enumerate(("gpu001", "gpu002", "gpu003")):
        state, verdict = decide(state, DrainRequest(incident_id=f"i{i}", nodes=(node,)), NOW + timedelta(seconds=i),
                                policy)
        verdicts.append(verdict)
    assert [v.allowed for v in verdicts] == [True, True, False] and verdicts[2].group == "switch leaf1"
    state, other = decide(state, DrainRequest(incident_id="i9", nodes=("gpu005",)), NOW + timedelta(seconds=9), policy)
    assert other.allowed  # another switch drains as before


class CountingScheduler(FakeScheduler):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.fail = False

    async def topology(self) -> tuple[SlurmSwitch, ...]:
        self.reads += 1
        if self.fail:
            raise TransientSchedulerError("slurmctld is restarting")
        return tuple(self.switches)


async def test_the_map_is_read_at_most_once_per_refresh_and_a_failed_read_keeps_the_last() -> None:
    scheduler = CountingScheduler()
    scheduler.switches = [SlurmSwitch(name="leaf1", nodes="node[1-2]")]
    clock = [0.0]
    cached = SwitchMap(scheduler, refresh_s=300.0, clock=lambda: clock[0])
    policy = BreakerPolicy(max_drains_per_switch=1)
    for _ in range(5):
        assert [g.name for g in (await cached.applied(policy)).switches] == ["leaf1"]
    assert scheduler.reads == 1
    clock[0], scheduler.fail = 301.0, True
    assert [g.name for g in (await cached.applied(policy)).switches] == ["leaf1"] and scheduler.reads == 2
    await cached.applied(BreakerPolicy())  # no switch limit: Slurm is not asked
    configured = policy.model_copy(update={"switches": (TopologyGroup(name="mine", nodes="node1"),)})
    assert await cached.applied(configured) == configured
    assert scheduler.reads == 2


async def test_a_failed_scontrol_show_topology_is_a_scheduler_error_the_map_survives() -> None:
    down = fail("slurm_load_topo error: Unable to contact slurm controller")
    runner = ScriptedRunner({("scontrol", "show", "topology"): down})
    cached = SwitchMap(SlurmCliBackend(runner))
    assert await cached.switches() == ()
