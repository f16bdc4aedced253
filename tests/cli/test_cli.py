"""The `goodput` console script, run as an operator would, against real Temporal servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler
from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.lifecycle import IncidentState
from tests.helpers import free_port, wait_until
from tests.workflows.helpers import (
    FAST,
    anomaly,
    cluster_with_three_users,
    inject,
    result,
    running_worker,
    wait_for_state,
)

pytestmark = pytest.mark.temporal
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


def run(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GOODPUT, *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture
def cli_env(temporal_address: str, task_queue: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": temporal_address, "GOODPUT_TASK_QUEUE": task_queue,
            "GOODPUT_DATA_DIR": str(tmp_path), "GOODPUT_CONFIG": str(tmp_path / "none.toml"),
            "GOODPUT_POLICY__COALESCE_WINDOW_S": "0.2", "COLUMNS": "200",
            "GOODPUT_CLUSTER": f"cli{uuid.uuid4().hex[:6]}"}


async def arun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The in-process worker must keep serving while the CLI process runs."""
    return await asyncio.to_thread(run, *args, env=env)


async def test_inject_list_show_approve(client: Client, task_queue: str, cli_env: dict[str, str]) -> None:
    # The service runs approve mode: an injected incident runs in it (the CLI cannot loosen it).
    async with running_worker(client, task_queue, policy=FAST.model_copy(update={"mode": Mode.APPROVE})) as fake:
        injected = await arun("inject", "--job", "1001", "--kind", "gpu-fault", "--node", "node2",
                       "--evidence", "NVRM: Xid (PCI:0000:3b:00): 79", env=cli_env)
        assert injected.returncode == 0, injected.stderr
        assert "opened incident" in injected.stdout
        incident = injected.stdout.split("incident ")[-1].split()[0]
        await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL)

        listed = await arun("incidents", "--json", env=cli_env)
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert any(r["incident_id"] == incident and r["job_id"] == "1001" for r in rows)

        shown = await arun("incident", incident, env=cli_env)
        assert shown.returncode == 0 and "awaiting-approval" in shown.stdout and "node2" in shown.stdout

        approved = await arun("approve", incident, "--reason", "confirmed", "--who", "erin", env=cli_env)
        assert approved.returncode == 0, approved.stderr
        assert "is now" in approved.stdout
        await wait_for_state(client, incident, IncidentState.RECOVERED)
        assert [d.target for d in fake.journal("drain")] == ["node2"]

        again = await arun("cancel", incident, "--reason", "late", env=cli_env)
        assert again.returncode == 4 and "already recovered" in again.stderr  # refused

        # The worker here keeps its audit log in memory: the trail comes back from the histories.
        trail = await arun("audit", "--from-histories", "--json", env=cli_env)
        assert trail.returncode == 0, trail.stderr
        mine = [r for r in map(json.loads, trail.stdout.splitlines()) if r["incident_id"] == incident]
        assert [(r["action"], r["actor"]) for r in mine] == [("approve", "operator:erin"), ("drain", "goodput"),
                                                             ("requeue", "goodput")]
        assert mine[0]["reason"] == "confirmed"


@pytest.mark.parametrize(("args", "message"), [
    (("approve", "incident-nope", "--reason", "x"), "no incident 'incident-nope'"),
    (("inject", "--job", "1;reboot"), "invalid job id"),
    (("inject",), "inject needs --job"),
    (("inject", "--job", "1", "--node", "a b"), "invalid node name"),
])
def test_operator_errors_are_clear(cli_env: dict[str, str], args: tuple[str, ...], message: str) -> None:
    done = run(*args, env=cli_env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_server_down_is_a_clear_error(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    done = run("incidents", env=env)
    assert done.returncode == 3  # unavailable
    assert "cannot reach Temporal" in done.stderr and "goodput up" in done.stderr


@pytest.fixture
def up_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    yield {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
           "GOODPUT_TEMPORAL_UI_PORT": str(free_port()), "GOODPUT_DATA_DIR": str(tmp_path / "data"),
           "GOODPUT_CONFIG": str(tmp_path / "none.toml"), "GOODPUT_POLICY__COALESCE_WINDOW_S": "0.2",
           "GOODPUT_CONSOLE__PORT": str(free_port())}


def start_up(env: dict[str, str], seen: list[str] | None = None) -> subprocess.Popen[str]:
    """`goodput up`, once it says it is up; what it printed until then goes to `seen`."""
    proc = subprocess.Popen([*GOODPUT, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    # A liveness bound, not a speed claim: a restart on a loaded CI machine has been seen past 60 s.
    deadline = time.monotonic() + 100
    seen = [] if seen is None else seen
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "goodput is up" in line:
            return proc
        seen.append(line)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    seen.append(proc.stdout.read())
    proc.stdout.close()  # else the pipe is collected in a later test as an unclosed-file ResourceWarning
    proc.wait()
    raise AssertionError("goodput up did not start: " + "".join(seen))


def stop_up(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(300)  # two starts of the embedded service, each bounded in start_up
def test_up_runs_monitor_mode_and_keeps_incidents_across_restart(up_env: dict[str, str]) -> None:
    proc = start_up(up_env)
    try:
        injected = run("inject", "--job", "1001", "--kind", "gpu-fault", "--node", "node2", env=up_env)
        assert injected.returncode == 0, injected.stderr
        incident = injected.stdout.split("incident ")[-1].split()[0]
        # The console and /metrics come up with the service; the embedded default's admin token
        # is in a private file, never printed.
        console = f"http://127.0.0.1:{up_env['GOODPUT_CONSOLE__PORT']}"
        token_file = Path(up_env["GOODPUT_DATA_DIR"]) / "console-admin.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        page = httpx.get(f"{console}/incidents", headers={"authorization": f"Bearer {token_file.read_text()}"})
        assert page.status_code == 200 and "Incidents" in page.text
        assert httpx.get(f"{console}/incidents").status_code == 401
        wait_until(lambda: run("incident", incident, "--json", env=up_env),
                   lambda shown: json.loads(shown.stdout or "{}").get("state") == "recommended-only",
                   timeout=30, interval=0.2, what=f"{incident} recommended-only")
        scraped = httpx.get(f"{console}/metrics").text  # what the worker in this process recorded
        assert 'goodput_incidents_closed_total{category="gpu-hardware",outcome="recommended-only"} 1.0' in scraped
    finally:
        stop_up(proc)
    assert not (Path(up_env["GOODPUT_DATA_DIR"]) / "fake-cluster.json").read_text().count('"op"')

    proc = start_up(up_env)
    try:
        listed = run("incidents", "--json", env=up_env)
        assert incident in listed.stdout
        assert "recommended-only" in listed.stdout
    finally:
        stop_up(proc)


def test_breaker_status_of_a_quiet_cluster(cli_env: dict[str, str]) -> None:
    done = run("breaker", env=cli_env)
    assert done.returncode == 0, done.stderr
    assert "closed" in done.stdout and "trips=0" in done.stdout
    assert run("breaker", "reset", env=cli_env).returncode == 2


async def test_nodes_shows_what_unrelated_incidents_say(client: Client, task_queue: str,
                                                       cli_env: dict[str, str]) -> None:
    quiet = await arun("nodes", "--json", env=cli_env)
    assert quiet.returncode == 0 and quiet.stdout == ""
    async with running_worker(client, task_queue, cluster_with_three_users()):
        for job_id in ("2001", "2002"):
            incident = await inject(client, task_queue, anomaly(
                job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                cluster=cli_env["GOODPUT_CLUSTER"]), FAST, Mode.MONITOR)
            await result(client, incident)
        shown = await arun("nodes", env=cli_env)
        listed = await arun("nodes", "--json", env=cli_env)
    assert shown.returncode == 0 and "node1" in shown.stdout and "yes" in shown.stdout, shown.stdout
    rows = {row["node"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert rows["node1"]["suspect"] and rows["node1"]["users"] == ["alice", "mallory"]
    assert not rows["node2"]["suspect"]


async def test_faults_group_the_incidents_that_blamed_one_node(client: Client, task_queue: str,
                                                             cli_env: dict[str, str]) -> None:
    fake = FakeScheduler()
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={"job_id": "1004", "nodes": ("node3",)}))
    async with running_worker(client, task_queue, fake):
        for job in ("1002", "1004"):
            await result(client, await inject(client, task_queue, anomaly(job, cluster=cli_env["GOODPUT_CLUSTER"],
                                                                          nodes=("node3",))))
        shown = await arun("faults", "--json", env=cli_env)
    assert shown.returncode == 0, shown.stderr
    faults = [f for f in map(json.loads, shown.stdout.splitlines()) if f["node"] == "node3"]
    cluster = cli_env["GOODPUT_CLUSTER"]
    assert [f["jobs"] for f in faults][:1] == [[f"{cluster}/1002", f"{cluster}/1004"]]
    # linked, in monitor mode too: one node incident, its one (recommended) isolation decision
    assert faults[0]["node_incident"] == f"node-incident/{cluster}/node3"
    assert faults[0]["isolation"].startswith("recommended by incident ")


def test_doctor_passes_on_a_working_setup_and_names_each_broken_piece(cli_env: dict[str, str],
                                                                     tmp_path: Path) -> None:
    healthy = run("doctor", "--json", env=cli_env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    found = {r["name"]: r["status"] for r in map(json.loads, healthy.stdout.splitlines())}
    assert found["temporal"] == found["slurm nodes"] == found["data dir"] == "ok"
    assert found["search attributes"] == "ok"

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    broken = run("doctor", env={**cli_env, "GOODPUT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
                                "GOODPUT_DATA_DIR": str(blocker / "data")})
    assert broken.returncode == 1
    assert "[FAIL] temporal" in broken.stdout and "[FAIL] data dir" in broken.stdout
    assert "[skip] search attributes" in broken.stdout and "problem(s): data dir, temporal" in broken.stdout
    assert "fix: start `goodput up`" in broken.stdout


async def test_kill_switch_from_the_command_line(client: Client, task_queue: str, cli_env: dict[str, str]) -> None:
    async with running_worker(client, task_queue):
        refused = await arun("kill-switch", "on", env=cli_env)
        assert refused.returncode == 2 and "kill-switch on needs --reason" in refused.stderr
        engaged = await arun("kill-switch", "on", "--reason", "storm of drains", "--who", "dana", env=cli_env)
        assert engaged.returncode == 0, engaged.stderr
        assert "ENGAGED: every partition in monitor mode (engaged by dana" in engaged.stdout
        status = await arun("kill-switch", env=cli_env)
        assert "ENGAGED" in status.stdout and "storm of drains" in status.stdout
        released = await arun("kill-switch", "off", "--reason", "reviewed", env=cli_env)
        assert released.returncode == 0 and "released (released by" in released.stdout
