"""Watchers on the real dev server: a job's log grows an Xid line, a job's state turns FAILED."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from goodput.demo.scheduler import FakeScheduler
from goodput.detect.watch import OptInRule, WatchClusterInput, WatchJobInput
from goodput.models import AnomalySource, IncidentKey
from goodput.scheduler import JobState
from tests.workflows.helpers import running_worker
from workers.watch import TemporalWatchLauncher, start_cluster_watch
from workflows.recovery import RecoveryWorkflow
from workflows.watch import job_watch_id

pytestmark = pytest.mark.temporal
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."

WRITER = """
import sys, time
path, xid = sys.argv[1], sys.argv[2]
with open(path, "a", buffering=1) as out:
    for step in range(1, 6):
        out.write(f"iteration {step}/ 100 | elapsed time per iteration (ms): 100.0\\n")
        time.sleep(0.05)
    out.write(xid + "\\n")
"""


async def workflow_exists(client: Client, workflow_id: str, timeout_s: float = 20.0) -> float:
    """Seconds until the workflow exists (polled; the benchmarks measure latency)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            await client.get_workflow_handle(workflow_id).describe()
            return time.monotonic() - start
        except RPCError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} did not start within {timeout_s}s")


async def incident_appears(client: Client, key: IncidentKey, timeout_s: float = 20.0) -> float:
    return await workflow_exists(client, key.workflow_id, timeout_s)


async def test_xid_line_in_a_growing_log_opens_an_incident(client: Client, task_queue: str, tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    log.write_text("")
    fake = FakeScheduler()
    one_node = fake.snapshot().jobs["1001"].model_copy(update={"nodes": ("node2",), "stdout_path": str(log),
                                                                 "user_id": os.getuid()})  # writes the log
    fake.add_job(one_node)
    cluster = f"w{time.monotonic_ns() % 10**6}"
    async with running_worker(client, task_queue, fake):
        await TemporalWatchLauncher(client, task_queue).launch(WatchJobInput(
            cluster=cluster, job=one_node, started_at=datetime.now(UTC), poll_interval_s=0.1))
        writer = subprocess.run([sys.executable, "-c", WRITER, str(log), XID], timeout=30, check=True)
        assert writer.returncode == 0
        await incident_appears(client, IncidentKey(cluster=cluster, job_id="1001", job_attempt=0))
        report = await client.get_workflow_handle_for(RecoveryWorkflow.run, IncidentKey(
            cluster=cluster, job_id="1001", job_attempt=0).workflow_id).query(RecoveryWorkflow.report)
        watch = client.get_workflow_handle(job_watch_id(cluster, "1001", 0))
        await watch.terminate("test over")
    evidence = [line for a in report.anomalies for line in a.evidence]
    assert XID in evidence
    assert report.anomalies[0].nodes == ("node2",) and "xid-79" in report.anomalies[0].signature_ids


async def test_cluster_watch_reports_a_failed_job(client: Client, task_queue: str) -> None:
    fake = FakeScheduler()
    cluster = f"cw{time.monotonic_ns() % 10**6}"
    async with running_worker(client, task_queue, fake):
        watch_id = await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, opt_in=OptInRule(), poll_interval_s=0.1))
        # Baseline first: a failure is only news once the watcher has seen the job running. Its
        # first scan launches the job watchers, so wait for one of them.
        await workflow_exists(client, job_watch_id(cluster, "1002", 0))
        fake.set_job_state("1002", JobState.FAILED, exit_code="1:0")
        failed = IncidentKey(cluster=cluster, job_id="1002", job_attempt=0)
        await incident_appears(client, failed)
        report = await client.get_workflow_handle_for(RecoveryWorkflow.run, failed.workflow_id).query(
            RecoveryWorkflow.report)
        await client.get_workflow_handle(watch_id).terminate("test over")
        others_opened = []
        for job in ("1001", "1003"):
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(IncidentKey(cluster=cluster, job_id=job, job_attempt=0)
                                                 .workflow_id).describe()
                others_opened.append(job)
        for job in ("1001", "1002", "1003"):  # the job watchers it launched (no log files: they end)
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(job_watch_id(cluster, job, 0)).terminate("test over")
    # the failure as the scheduler reported it, for that job alone
    [seen] = report.anomalies
    assert (seen.source, seen.job_id) == (AnomalySource.SCHEDULER, "1002"), seen
    assert seen.evidence[0].startswith("slurm: job 1002 FAILED exit=1:0"), seen.evidence
    assert others_opened == []  # no incident for the jobs that did not fail
