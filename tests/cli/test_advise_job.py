"""`goodput advise --job`, run as an operator would: the job's record from the (fake) scheduler,
its checkpoints from a real tree its comment names, its failure rate from goodput's incidents."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from goodput.demo.scheduler import demo_cluster
from goodput.detect.hang import ProgressState
from goodput.detect.live import LiveState
from goodput.detect.watch import WatchCheckpoint
from tests.helpers import free_port
from tests.unit.test_checkpoint_job_advice import generic_tree
from tests.workflows.helpers import anomaly, inject, result, running_worker
from workflows.watch import job_watch_id

GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GOODPUT, *args], env=env, capture_output=True, text=True, timeout=90, check=False)


@activity.defn(name="stub_watch_job_logs")
async def stub_watch(step_times: list[float]) -> None:
    """Heartbeats what a job watcher's hang detector learned, as the real watcher does."""
    live = LiveState(progress=ProgressState(started_at=datetime.now(UTC), step_times=tuple(step_times)))
    while True:
        activity.heartbeat(WatchCheckpoint(live=live))
        await asyncio.sleep(0.2)


@workflow.defn(name="StubJobWatch", sandboxed=False)
class StubJobWatch:
    @workflow.run
    async def run(self, step_times: list[float]) -> None:
        await workflow.execute_activity(stub_watch, step_times, start_to_close_timeout=timedelta(minutes=5),
                                        heartbeat_timeout=timedelta(seconds=10))


async def heartbeated(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the stub watcher's first heartbeat reached the server."""
    for _ in range(100):
        described = await handle.describe()
        if any(p.heartbeat_details.payloads for p in described.raw_description.pending_activities):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the stub watcher never heartbeated")


def cluster_state(data_dir: Path, checkpoints: Path) -> None:
    """The demo cluster (8 nodes of gpu:8), job 1001 naming `checkpoints`, owned by this user."""
    state = demo_cluster()
    state.jobs["1001"] = state.jobs["1001"].model_copy(update={
        "comment": f"goodput:opt-in goodput:ckpt=generic:{checkpoints}", "user_id": os.getuid(),
        "group_id": os.getgid()})
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "fake-cluster.json").write_text(state.model_dump_json())


def env_for(tmp_path: Path, temporal: str, task_queue: str = "unused") -> dict[str, str]:
    cluster_state(tmp_path / "data", generic_tree(tmp_path / "ckpt"))
    return {**os.environ, "GOODPUT_TEMPORAL_ADDRESS": temporal, "GOODPUT_TASK_QUEUE": task_queue,
            "GOODPUT_DATA_DIR": str(tmp_path / "data"), "GOODPUT_CONFIG": str(tmp_path / "none.toml"),
            "GOODPUT_SCHEDULER": "fake", "GOODPUT_CLUSTER": f"adv{uuid.uuid4().hex[:6]}", "COLUMNS": "200"}


def test_with_the_numbers_given_no_temporal_is_needed_and_the_tree_is_the_jobs(tmp_path: Path) -> None:
    env = env_for(tmp_path, f"127.0.0.1:{free_port()}")  # nothing listens there
    given = run("advise", "--job", "1001", "--step-time", "2", "--mtbf-hours", "24", "--json", env=env)
    assert given.returncode == 0, given.stdout + given.stderr
    advice = json.loads(given.stdout)
    assert advice["checkpoint_count"] == 3 and advice["advice"]["save_cost_s"] == pytest.approx(30.0, abs=1.0)
    assert advice["gpus"] == {"value": 16.0, "source": "gres of its 2 node(s)"}
    assert advice["owner"] == "goodput-demo" and advice["nodes"] == 2

    unmeasured = run("advise", "--job", "1001", env=env)  # Temporal down: nothing measured beyond the tree
    assert unmeasured.returncode == 1, unmeasured.stderr
    assert "not measured: step time" in unmeasured.stdout and "--step-time" in unmeasured.stdout
    assert "incidents could not be listed" in unmeasured.stdout and "--mtbf-hours" in unmeasured.stdout

    unknown = run("advise", "--job", "999999", "--step-time", "2", "--mtbf-hours", "24", env=env)
    assert unknown.returncode == 2 and "job 999999" in unknown.stderr
    neither = run("advise", env=env)
    assert neither.returncode == 2 and "--job JOB" in neither.stderr


@pytest.mark.temporal
async def test_the_mtbf_is_measured_from_node_faults_goodput_recorded(client: Client, temporal_address: str,
                                                                     task_queue: str, tmp_path: Path) -> None:
    env = env_for(tmp_path, temporal_address, task_queue)
    stub_queue = f"stub-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, task_queue), Worker(client, task_queue=stub_queue, workflows=[StubJobWatch],
                                                          activities=[stub_watch]):
        for job, node in (("1002", "node3"), ("1003", "node5")):
            await result(client, await inject(client, task_queue, anomaly(job, cluster=env["GOODPUT_CLUSTER"],
                                                                          nodes=(node,))))
        watcher = await client.start_workflow(StubJobWatch.run, [2.0, 1.9, 2.1],
                                              id=job_watch_id(env["GOODPUT_CLUSTER"], "1001", 0), task_queue=stub_queue)
        await heartbeated(watcher)
        shown = await asyncio.to_thread(run, "advise", "--job", "1001", "--since", "7d", env=env)
        await watcher.terminate()
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "step time: 2 s (median of 3 step(s) its watcher measured (attempt 0))" in shown.stdout
    assert "MTBF: " in shown.stdout and "2 node fault(s) in 7.0 days on 8 nodes" in shown.stdout
    assert "x 2 node(s) of the job" in shown.stdout and "advised (Young-Daly)" in shown.stdout
