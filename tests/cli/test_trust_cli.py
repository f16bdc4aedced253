"""`goodput trust [--json]`, `goodput trust pin RULE MODE` and `cancel --reason-kind` end to end:
the CLI process against the real Temporal dev server and an in-process worker."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.cli.test_cli import arun, cli_env
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker, wait_for_state

pytestmark = pytest.mark.temporal
__all__ = ["cli_env"]  # the fixture, shared with test_cli


async def test_trust_shows_the_record_a_typed_cancel_fed_and_a_pin(client: Client, task_queue: str,
                                                                   cli_env: dict[str, str]) -> None:
    empty = await arun("trust", "--json", env=cli_env)
    assert empty.returncode == 0 and empty.stdout == "", empty.stderr
    async with running_worker(client, task_queue):
        incident = await inject(client, task_queue, anomaly(cluster=cli_env["GOODPUT_CLUSTER"]), FAST, Mode.APPROVE)
        await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)
        cancelled = await arun("cancel", incident, "--reason-kind", "wrong-node", "--reason", "node2 is fine",
                               env=cli_env)
        assert cancelled.returncode == 0, cancelled.stderr
        report = await result(client, incident)
        assert report.decision is not None and report.decision.reason == "wrong-node: node2 is fine"
        listed = await arun("trust", "--json", env=cli_env)
        [line] = [json.loads(row) for row in listed.stdout.splitlines()]
        assert (line["recommendations"], line["disagreed"], line["wrong"], line["autonomy"]) == (1, 1, 1, "approve")

        refused = await arun("trust", "pin", line["rule"], "autonomous", env=cli_env)
        assert refused.returncode == 2 and "trust pin needs --reason" in refused.stderr
        pinned = await arun("trust", "pin", line["rule"], "autonomous", "--reason", "vendor confirmed", "--who",
                            "dana", env=cli_env)
        assert pinned.returncode == 0, pinned.stderr
        assert "autonomous (pinned to autonomous by dana: vendor confirmed)" in pinned.stdout
        shown = await arun("trust", env=cli_env)
    assert shown.returncode == 0 and line["rule"] in shown.stdout and "(pinned)" in shown.stdout, shown.stdout
