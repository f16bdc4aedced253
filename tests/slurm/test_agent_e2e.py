"""End to end: a GPU fault that only the node's kernel log shows still recovers the job.

A real PyTorch DDP job trains on node2 and another lab node and prints nothing about GPUs. The
node agent of node2 (`goodput agent`, in-process here: kernel log only, no NVML on these
machines) tails node2's own kernel-log file; an Xid 79 line is appended to it, as the NVIDIA
driver would write it. The incident must open from that line alone, blame node2 and its GPU,
drain node2 and resubmit the job excluding it, resuming from its newest checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.node_agent import run_agent
from goodput.checkpoints import CheckpointConfig, to_comment
from goodput.detect.hang import HangConfig
from goodput.detect.node_agent import AgentConfig
from goodput.detect.watch import WatchClusterInput
from goodput.models import AnomalySource, Category, CulpritKind, IncidentKey
from goodput.ownership import owning_incident
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import result
from tests.workflows.test_watchers import incident_appears
from workers.client import TemporalIncidentService
from workers.watch import IncidentSink, start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab
from .harness import eventually
from .test_training_e2e import SCRIPT, TRAIN, Scenario, policy

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

XID_79 = "{stamp} node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."


async def test_an_xid_in_node2s_kernel_log_alone_drains_node2_and_resubmits_the_job_elsewhere(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    s = Scenario(lab, client, task_queue, tmp_path)
    kern = tmp_path / "node2-kern.log"
    kern.write_text("2026-12-01T00:00:00+00:00 node2 kernel: usb 1-1: new high-speed USB device\n")
    rules = policy(resume=ResumeStrategy.RESUBMIT)
    stop = asyncio.Event()
    async with build_worker(client, task_queue, s.backend, RecordingNotifier(), policy=rules):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=s.cluster, poll_interval_s=0.5, log_poll_interval_s=0.1,
            hang=HangConfig(k=5, floor_s=4, startup_grace_s=120)))
        sink = IncidentSink(TemporalIncidentService(client, task_queue), rules)
        agent = asyncio.create_task(run_agent(
            AgentConfig(node="node2", probe="none", kernel_log=kern, interval_s=0.2, job_refresh_s=0.5),
            s.cluster, s.backend, sink, stop))
        try:
            script = tmp_path / "train.sbatch"
            script.write_text(SCRIPT.format(ckpt=s.ckpt, faults=s.faults, fault_after=10**6,
                                            repo=Path(__file__).resolve().parents[2], python=sys.executable,
                                            train=TRAIN))
            comment = f"goodput:opt-in {to_comment(CheckpointConfig(layout='dcp', root=str(s.ckpt), settle_s=0))}"
            job_id = lab.sbatch(f"--output={tmp_path}/out-%j.log", f"--chdir={tmp_path}", f"--comment={comment}",
                                "--nodelist=node2", str(script))
            await eventually(lambda: _exists(s.ckpt / "step-10" / ".metadata"), bool, timeout=90,
                             what="the job's step-10 checkpoint")
            with kern.open("a") as out:  # what the driver writes; the job itself prints nothing about it
                out.write(XID_79.format(stamp=datetime.now(UTC).isoformat()) + "\n")
            key = IncidentKey(cluster=s.cluster, job_id=job_id, job_attempt=0)
            await incident_appears(client, key, timeout_s=60)
            report = await result(client, key.workflow_id)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(agent, timeout=10)
            await client.get_workflow_handle(cluster_watch_id(s.cluster)).terminate("scenario over")

    assert report.state is IncidentState.RECOVERED, report.timeline
    # The incident opened from the kernel log; later evidence (the job's end as it was replaced)
    # may join it, but nothing the job printed mentions the GPU.
    first = min(report.anomalies, key=lambda a: a.detected_at)
    assert first.source is AnomalySource.GPU and "Xid" in " ".join(first.evidence), report.anomalies
    assert not any("Xid" in line for a in report.anomalies if a.source is not AnomalySource.GPU
                   for line in a.evidence), [(a.source, a.kind, a.evidence) for a in report.anomalies]
    assert report.attribution is not None and report.attribution.category is Category.GPU_HARDWARE
    assert report.attribution.culprit_nodes == ("node2",)
    gpus = [c.id for c in report.attribution.culprits if c.kind is CulpritKind.GPU]
    assert gpus and "3b:00" in gpus[0].lower()
    assert owning_incident(lab.node("node2")["Reason"]) == report.incident_id
    new_id = report.resumed_job_id
    assert new_id and new_id != job_id
    new_job = await s.backend.get_job(new_id)
    assert "node2" not in new_job.nodes and "node2" in new_job.excluded_nodes
    assert report.checkpoint is not None and report.checkpoint.step >= 10
    assert "Xid" not in s.output(job_id)  # the job never said a word about its GPU


async def _exists(path: Path) -> bool:
    return path.exists()
