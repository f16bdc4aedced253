"""`goodput doctor` on a GPU node: does its slurmd list the node's job processes, as the node agent
reads them? If not, the agent asks the controller instead, which costs slurmctld the whole cluster's
job list every refresh (#29): a warning with the fix. A host not set up as an agent skips it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from activities.adapters.node_jobs import NO_STEPS
from activities.adapters.slurm_runner import CommandResult
from goodput.cli.doctor import Status
from goodput.config import SchedulerKind, Settings
from goodput.detect.node_agent import AgentConfig
from tests.unit.slurm_cli_helpers import FIXTURES
from workers.doctor import agent_jobs_check


class Answer:
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.calls.append(tuple(argv))
        return self.result


def agent_settings(tmp_path: Path, **agent: object) -> Settings:
    return Settings(data_dir=tmp_path, scheduler=SchedulerKind.SLURM_CLI,
                    agent=AgentConfig(**{"node": "node1", **agent}))


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))


async def test_a_node_whose_slurmd_lists_its_jobs_is_ok(tmp_path: Path) -> None:
    runner = Answer(CommandResult(argv=(), returncode=0, stdout=(FIXTURES / "listpids-node-22.05.txt").read_text(),
                                  stderr=""))
    result = await agent_jobs_check(agent_settings(tmp_path), runner)
    assert result.status is Status.OK and "2 job(s)" in result.found
    assert runner.calls == [("scontrol", "listpids", "*", "node1")]
    empty = Answer(CommandResult(argv=(), returncode=1, stdout="PID JOBID STEPID LOCALID GLOBALID\n",
                                 stderr=NO_STEPS + "\n"))
    assert (await agent_jobs_check(agent_settings(tmp_path), empty)).status is Status.OK


async def test_a_node_that_cannot_list_them_is_a_warning_with_the_fix(tmp_path: Path) -> None:
    runner = Answer(CommandResult(argv=(), returncode=1, stdout="", stderr="scontrol: error: Domain socket "
                                  "directory /var/spool/slurmd/node1: No such file or directory\n" + NO_STEPS))
    result = await agent_jobs_check(agent_settings(tmp_path), runner)
    assert result.status is Status.WARN and "Domain socket directory" in result.found
    assert "agent.node" in result.fix and "whole cluster" in result.fix


@pytest.mark.parametrize("agent", [{"node": ""}, {"jobs_from": "controller"}], ids=["not-an-agent", "controller"])
async def test_a_host_that_is_no_agent_or_asks_the_controller_skips(tmp_path: Path, agent: dict[str, str]) -> None:
    runner = Answer(CommandResult(argv=(), returncode=0, stdout="", stderr=""))
    result = await agent_jobs_check(agent_settings(tmp_path, **agent), runner)
    assert result.status is Status.SKIPPED and runner.calls == []
