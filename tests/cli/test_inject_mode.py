"""Who decides the mode: an incident `goodput inject` opens runs in the service's mode (per
partition), whatever the CLI's own settings say; `--mode` may ask for a stricter one, never a
looser one. Real Temporal dev server, a worker in this process holding the service's policy."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from tests.workflows.helpers import FAST, running_worker, wait_for_state

pytestmark = pytest.mark.temporal
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


@pytest.fixture
def cli_env(temporal_address: str, task_queue: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": temporal_address, "GOODPUT_TASK_QUEUE": task_queue,
            "GOODPUT_DATA_DIR": str(tmp_path), "GOODPUT_CONFIG": str(tmp_path / "none.toml"),
            "GOODPUT_CLUSTER": f"mode{uuid.uuid4().hex[:6]}", "COLUMNS": "200"}


async def inject(env: dict[str, str], *flags: str) -> str:
    """`goodput inject` a GPU fault on the demo cluster's job 1001 (partition gpu); the incident id."""
    argv = [*GOODPUT, "inject", "--job", "1001", "--kind", "gpu-fault", "--node", "node2", *flags]
    done = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, text=True,
                                   timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("incident ")[-1].split()[0]


def service(mode: Mode, **update: object) -> Policy:
    return FAST.model_copy(update={"mode": mode, **update})


async def test_an_injected_incident_runs_in_the_services_mode_not_the_clis(
        client: Client, task_queue: str, cli_env: dict[str, str]) -> None:
    async with running_worker(client, task_queue, policy=service(Mode.APPROVE)) as fake:
        incident = await inject(cli_env)  # the CLI's own settings: the default, monitor
        report = await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL,
                                      IncidentState.RECOMMENDED_ONLY)
        assert report.state is IncidentState.AWAITING_APPROVAL and report.mode is Mode.APPROVE
        assert fake.journal() == []


async def test_the_services_partition_mode_governs(client: Client, task_queue: str,
                                                  cli_env: dict[str, str]) -> None:
    policy = service(Mode.MONITOR, partition_modes={"gpu": Mode.APPROVE})
    async with running_worker(client, task_queue, policy=policy):
        incident = await inject(cli_env)
        report = await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL,
                                      IncidentState.RECOMMENDED_ONLY)
        assert report.state is IncidentState.AWAITING_APPROVAL


async def test_a_looser_mode_asked_for_gets_the_services(client: Client, task_queue: str,
                                                        cli_env: dict[str, str]) -> None:
    cli_env["GOODPUT_POLICY__MODE"] = "autonomous"  # the reporter's own settings say act, too
    async with running_worker(client, task_queue, policy=service(Mode.MONITOR)) as fake:
        incident = await inject(cli_env, "--mode", "autonomous")
        report = await wait_for_state(client, incident, IncidentState.RECOMMENDED_ONLY, IncidentState.RECOVERED,
                                      IncidentState.RESUMING, IncidentState.ISOLATING)
        assert report.state is IncidentState.RECOMMENDED_ONLY and report.mode is Mode.MONITOR
        assert fake.journal() == []


async def test_a_stricter_mode_asked_for_is_honoured(client: Client, task_queue: str,
                                                    cli_env: dict[str, str]) -> None:
    async with running_worker(client, task_queue, policy=service(Mode.AUTONOMOUS)) as fake:
        incident = await inject(cli_env, "--mode", "approve")
        report = await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL, IncidentState.RECOVERED,
                                      IncidentState.RESUMING, IncidentState.ISOLATING)
        assert report.state is IncidentState.AWAITING_APPROVAL and report.mode is Mode.APPROVE
        assert fake.journal() == []
