"""The `--json` contract of every command that has it, `--dry-run` changing nothing, and a refused
decision's exit code, against a real Temporal dev server."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.cli.grammar import commands
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.cli.test_cli import arun, cli_env  # noqa: F401 -- the fixture, shared
from tests.workflows.helpers import FAST, running_worker, wait_for_state
from workers.cli_parser import build_parser

pytestmark = pytest.mark.temporal
ROOT = Path(__file__).resolve().parents[2]
ONE, LINES = "one JSON object", "JSON Lines"
# Every command with --json and what it prints; the test below holds this table to the parser.
CONTRACT: dict[str, tuple[str, tuple[str, ...]]] = {
    "incidents": (LINES, ("incidents",)),
    "incident": (ONE, ("incident", "{incident}")),
    "faults": (LINES, ("faults",)),
    "nodes": (LINES, ("nodes",)),
    "trust": (LINES, ("trust",)),
    "lost-work": (ONE, ("lost-work",)),
    "doctor": (LINES, ("doctor",)),
    "audit": (LINES, ("audit", "--from-histories")),
    "classify": (LINES, ("classify", str(ROOT / "tests/fixtures/logs/nccl_timeout_after_xid.log"),
                         str(ROOT / "tests/fixtures/logs/app_exception_rank3.log"))),
    "checkpoints": (ONE, ("checkpoints", str(ROOT / "tests/fixtures/checkpoints/lightning"))),
    "advise": (ONE, ("advise", "{ckpt}", "--layout", "generic", "--step-time", "2", "--gpus", "64",
                     "--mtbf-hours", "24")),
}


# The service's policy decides an incident's mode; a reporter's --mode may only make it stricter.
APPROVE = FAST.model_copy(update={"mode": Mode.APPROVE})


def test_the_contract_table_covers_every_command_with_json() -> None:
    with_json = {name for name, sub in commands(build_parser())
                 if any("--json" in a.option_strings for a in sub._actions)}
    assert with_json == set(CONTRACT)


def checkpoint_tree(root: Path) -> Path:
    """Three saves in the generic layout, 30 s each beyond 100 steps of 2 s (as advise measures)."""
    start = time.time() - 86400
    for i, step in enumerate((100, 200, 300)):
        d = root / f"ckpt_{step}"
        d.mkdir(parents=True)
        (d / "model.bin").write_bytes(b"x" * 64)
        (d / ".complete").write_text("done")
        for path in (d / "model.bin", d / ".complete", d):
            os.utime(path, (start + i * 230, start + i * 230))
    return root


async def approve_mode_incident(client: Client, env: dict[str, str]) -> str:
    injected = await arun("inject", "--job", "1001", "--kind", "gpu-fault", "--node", "node2",
                          "--mode", "approve", env=env)
    assert injected.returncode == 0, injected.stderr
    incident = injected.stdout.split("incident ")[-1].split()[0]
    await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)
    return incident


async def test_json_is_one_object_for_one_thing_and_json_lines_for_lists(
        client: Client, task_queue: str, cli_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    wrong = []
    async with running_worker(client, task_queue, policy=APPROVE):
        incident = await approve_mode_incident(client, cli_env)
        assert (await arun("approve", incident, "--reason", "for the audit trail", env=cli_env)).returncode == 0
        await wait_for_state(client, incident, IncidentState.RECOVERED)
        for name, (shape, args) in CONTRACT.items():
            argv = [a.format(incident=incident, ckpt=checkpoint_tree(tmp_path / "ckpt") if a == "{ckpt}" else "")
                    for a in args]
            done = await arun(*argv, "--json", env=cli_env)
            lines = done.stdout.splitlines()
            try:
                parsed = [json.loads(line) for line in lines]
            except json.JSONDecodeError:
                parsed = []
            ok = parsed and all(isinstance(p, dict) for p in parsed) and (shape == LINES or len(parsed) == 1)
            if name in ("nodes", "trust") and not lines:
                ok = True  # nothing recorded yet: an empty list is no lines (rows: test_cli, test_trust_cli)
            if not ok:
                wrong.append(f"{name} (rc {done.returncode}): not {shape}: {done.stdout[:200]!r} {done.stderr[:200]!r}")
    assert not wrong, "\n".join(wrong)


async def test_dry_run_prints_what_would_be_done_and_changes_nothing(
        client: Client, task_queue: str, cli_env: dict[str, str]) -> None:  # noqa: F811
    async with running_worker(client, task_queue, policy=APPROVE) as fake:
        incident = await approve_mode_incident(client, cli_env)
        for verb in ("approve", "cancel"):
            done = await arun(verb, incident, "--reason", "checking", "--who", "erin", "--dry-run", env=cli_env)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(f"would {verb} incident {incident} (now awaiting-approval) as erin")
            assert "its plan: drain-nodes node2" in done.stdout
        assert (await arun("approve", "incident-nope", "--reason", "x", "--dry-run", env=cli_env)).returncode == 2

        engaged = await arun("kill-switch", "on", "--reason", "drill", "--dry-run", env=cli_env)
        assert engaged.returncode == 0 and engaged.stdout.startswith("would engage the kill switch"), engaged.stderr
        reset = await arun("breaker", "reset", "--reason", "drill", "--dry-run", env=cli_env)
        assert reset.returncode == 0 and reset.stdout.startswith("would reset the drain breaker"), reset.stderr
        returned = await arun("nodes", "return", "node2", "--reason", "drill", "--dry-run", env=cli_env)
        assert returned.returncode == 0 and returned.stdout.startswith("would end the quarantine of node2"), \
            returned.stderr
        assert (await arun("nodes", "return", "node2", env=cli_env)).returncode == 2  # no --reason: refused
        before = (await arun("incidents", "--json", env=cli_env)).stdout
        submitted = await arun("inject", "--job", "1002", "--node", "node3", "--dry-run", env=cli_env)
        assert submitted.returncode == 0 and submitted.stdout.startswith("would submit anomaly"), submitted.stderr

        # Nothing changed: the incident still waits, nothing was drained, the switch is released,
        # no incident was opened for 1002.
        report = await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)
        assert report.decision is None
        assert fake.journal("drain") == []
        assert "released" in (await arun("kill-switch", env=cli_env)).stdout
        assert (await arun("incidents", "--json", env=cli_env)).stdout == before

        # A decision the incident does not take now is refused (exit 4), not a usage error.
        approved = await arun("approve", incident, "--reason", "confirmed", env=cli_env)
        assert approved.returncode == 0, approved.stderr
        await wait_for_state(client, incident, IncidentState.RECOVERED)
        again = await arun("cancel", incident, "--reason", "late", "--dry-run", env=cli_env)
        assert "now recovered" in again.stdout
        refused = await arun("cancel", incident, "--reason", "late", env=cli_env)
        assert refused.returncode == 4 and "already recovered" in refused.stderr
