"""The Slurm backends' one action template: validate, read, no-op check, act, result."""

import pytest

from activities.adapters.slurm_action import act_unless_done, change_node
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import ActionResult, NodeInfo, NotOwnedError
from goodput.slurm import rules


class Recorder:
    def __init__(self, node: NodeInfo) -> None:
        self.node = node
        self.reads: list[str] = []
        self.acts = 0

    async def read(self, name: str) -> NodeInfo:
        self.reads.append(name)
        return self.node

    async def act(self) -> None:
        self.acts += 1


async def test_acts_once_and_says_so_when_the_change_is_not_made_yet() -> None:
    node = Recorder(NodeInfo(name="n1", state="IDLE"))
    result = await change_node("n1", "goodput:inc-1", read=node.read, noop=rules.drain_noop, act=node.act,
                               done="drained")
    assert result == ActionResult(changed=True, detail="drained n1")
    assert (node.reads, node.acts) == (["n1"], 1)


async def test_a_change_already_made_is_not_sent_again() -> None:
    node = Recorder(NodeInfo(name="n1", state="IDLE", flags=("DRAIN",), reason="goodput:inc-1"))
    result = await change_node("n1", "goodput:inc-1", read=node.read, noop=rules.drain_noop, act=node.act,
                               done="drained")
    assert not result.changed and "already drained" in result.detail
    assert node.acts == 0


@pytest.mark.parametrize(("state", "flags", "reason", "drained"), [
    ("DOWN", (), "admin: PSU", False),                      # an administrator's DOWN: theirs
    ("IDLE", ("NOT_RESPONDING",), "Not responding", False),  # Slurm's own verdict: theirs
    ("MIXED", ("FAIL",), "hw check", False),
    ("IDLE", ("DRAIN",), "admin: bad fan", False),
    ("IDLE", (), "admin: bad fan", True),   # resumed; Slurm 24.11 keeps the reason: not a claim
    ("ALLOCATED", (), "t3", True),
])
async def test_only_a_node_out_of_service_for_someone_else_is_left_alone(
        state: str, flags: tuple[str, ...], reason: str, drained: bool) -> None:
    node = Recorder(NodeInfo(name="n1", state=state, flags=flags, reason=reason))
    result = await change_node("n1", "goodput:inc-1", read=node.read, noop=rules.drain_noop, act=node.act,
                               done="drained")
    assert (result.changed, node.acts) == (drained, int(drained))


async def test_a_refusal_from_the_rules_stops_before_acting() -> None:
    node = Recorder(NodeInfo(name="n1", state="IDLE", flags=("DRAIN",), reason="admin: bad fan"))
    with pytest.raises(NotOwnedError):
        await change_node("n1", "goodput:inc-1", read=node.read, noop=rules.resume_noop, act=node.act,
                          done="resumed")
    assert node.acts == 0


@pytest.mark.parametrize(("name", "reason"), [("n1;reboot", "goodput:inc-1"), ("n1", "two\nlines"), ("n1", "")])
async def test_an_invalid_node_or_reason_is_refused_before_anything_is_read(name: str, reason: str) -> None:
    node = Recorder(NodeInfo(name="n1", state="IDLE"))
    with pytest.raises(InvalidIdentifierError):
        await change_node(name, reason, read=node.read, noop=rules.drain_noop, act=node.act, done="drained")
    assert (node.reads, node.acts) == ([], 0)


async def test_the_act_gets_what_was_read() -> None:
    seen: list[tuple[int, str]] = []

    async def read() -> tuple[int, str]:
        return 7, "job"

    async def act(state: tuple[int, str]) -> None:
        seen.append(state)

    assert await act_unless_done(read, lambda _: None, act, "held 7") == ActionResult(changed=True, detail="held 7")
    assert seen == [(7, "job")]
