"""A Slurm user's own output cannot pick a node for goodput to drain, nor a file for it to read.

As `goodput-mallory`, a real unprivileged lab user: a job prints a kernel-style Xid line that names
another node; through the log watcher (autonomous mode, so goodput would act) and through the log
push endpoint, the incident names the node as unverified evidence and drains nothing. A job that
swaps its output file for a symlink to a root-only file gets that file refused, not read. A batch
script whose `#!` line names a program that does not exist (directly, or an interpreter that is itself
a script with a missing interpreter: execve(2) answers ENOENT as for a missing file) is reported by
slurmstepd as a bad interpreter, not as the spool's missing script, and drains nothing.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.push import PushConfig
from goodput.detect.watch import OptInRule, WatchClusterInput
from goodput.diagnose.classify import classify_file
from goodput.models import IncidentKey, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, result
from tests.workflows.test_watchers import incident_appears
from workers.client import TemporalIncidentService
from workers.push import PushServer
from workers.watch import IncidentSink, start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id, job_watch_id

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

MALLORY = "goodput-mallory"
TOKEN = "push-token-for-the-lab"
# A kernel line as a job can print it: the host in it is the attacker's choice.
FORGED = "Dec  1 09:00:00 {victim} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
JOB = """#!/bin/bash
step=0
while true; do
  step=$((step + 1))
  echo "iteration $step/ 1000 | elapsed time per iteration (ms): 200.0"
  if [ "$step" = 5 ]; then echo "{line}"; fi
  sleep 0.2
done
"""


def submit_as_mallory(lab: Lab, line: str) -> str:
    out = lab.user_dir(MALLORY) / "out-%j.log"
    return lab.sbatch_as(MALLORY, "--comment=goodput:opt-in", "--nodes=1", "--nodelist=node1", "--no-requeue",
                         f"--output={out}", script=JOB.format(line=line))


def unverified(report: IncidentReport) -> tuple[str, ...]:
    assert report.attribution is not None
    return report.attribution.unverified_nodes


async def test_a_job_printing_another_nodes_xid_drains_nothing(lab: Lab, client: Client, task_queue: str) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    # Autonomous: if the forged host reached the plan, goodput would really drain it.
    policy = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                    verify_running_timeout_s=5, verify_progress_timeout_s=5, max_resume_attempts=1)
    job_id = submit_as_mallory(lab, FORGED.format(victim="node4"))
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=20, what="mallory's job to run")
    assert job.user == MALLORY and job.nodes == ("node1",)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.3, log_poll_interval_s=0.1, opt_in=OptInRule()))
        key = IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
        await incident_appears(client, key, timeout_s=40)
        report = await result(client, key.workflow_id)
        await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("test over")
    assert "xid-79" in report.anomalies[0].signature_ids
    assert unverified(report) == ("node4",)
    assert report.plan is not None and report.plan.nodes_to_drain() == ()
    for node in ("node1", "node4"):
        assert "DRAIN" not in lab.node(node)["State"], lab.node(node)


async def test_a_pushed_line_cannot_implicate_a_node_outside_its_job(lab: Lab, client: Client,
                                                                     task_queue: str) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    # One log line would drain (no second signal needed): so only the allocation check keeps node3 out.
    policy = Policy(mode=Mode.MONITOR, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0)
    job_id = submit_as_mallory(lab, "nothing to see")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=20,
                           what="mallory's job to run")
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        sink = IncidentSink(TemporalIncidentService(client, task_queue), policy)
        server = PushServer(PushConfig(enabled=True, port=0, tokens=(TOKEN,)), sink, cluster)
        await server.start()
        try:
            # From the job's own output file, so only the node it names is in question here.
            record = {"log": FORGED.format(victim="node3"), "job_id": job_id, "host": "node1",
                      "file": job.stdout_path}
            async with httpx.AsyncClient(timeout=10) as http:
                response = await http.post(f"{server.url}/v1/logs", json=record,
                                           headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status_code == 200 and response.json()["anomalies"] == 1, response.text
            key = IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
            report = await result(client, key.workflow_id)
        finally:
            await server.stop()
    assert unverified(report) == ("node3",)
    assert report.plan is not None and report.plan.nodes_to_drain() == ()


async def test_an_output_file_swapped_for_a_symlink_is_refused(lab: Lab, client: Client, task_queue: str) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    secret = lab.dir / "root-only-secret"
    secret.write_text(FORGED.format(victim="node2") + "\n")
    secret.chmod(0o600)
    out = lab.user_dir(MALLORY) / "swapped.log"
    # The job replaces its own output file with a link to a root-only file goodput could read.
    script = (f"#!/bin/bash\nrm -f {out}\nln -s {secret} {out}\n"
              "while true; do sleep 1; done\n")
    job_id = lab.sbatch_as(MALLORY, "--comment=goodput:opt-in", "--nodes=1", f"--output={out}", script=script)
    await eventually(lambda: _is_link(out), bool, timeout=20, what="the job to swap its output")
    policy = Policy(mode=Mode.MONITOR, coalesce_window_s=0.2, linger_s=0)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.3, log_poll_interval_s=0.1, opt_in=OptInRule()))
        watch = client.get_workflow_handle(job_watch_id(cluster, job_id, 0))
        outcome = await eventually(lambda: _watch_result(watch), lambda r: r is not None, timeout=30,
                                   what="the job watcher to finish")
        await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("test over")
    assert "symbolic link" in str(outcome)
    with pytest.raises(Exception, match="not found"):
        await client.get_workflow_handle(IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
                                         .workflow_id).describe()
    assert os.stat(secret).st_mode & 0o777 == 0o600


async def _is_link(path: Path) -> bool:
    return path.is_symlink()


async def _watch_result(handle: WorkflowHandle[Any, Any]) -> object | None:
    try:
        description = await handle.describe()
    except Exception:
        return None
    if description.status is None or description.status.name == "RUNNING":
        return None
    return await handle.result()


@pytest.mark.parametrize("nested", [False, True], ids=["missing-interpreter", "interpreter-whose-own-is-missing"])
async def test_a_batch_script_with_a_missing_interpreter_drains_nothing(lab: Lab, nested: bool) -> None:
    interpreter = "/nonexistent/shell"
    if nested:  # executable, so only execve's ENOENT (for its own `#!`) says anything is missing
        wrapper = lab.user_dir(MALLORY) / f"interpreter-{uuid.uuid4().hex[:6]}"
        wrapper.write_text("#!/nonexistent/shell\n")
        wrapper.chmod(0o755)
        interpreter = str(wrapper)
    out = lab.user_dir(MALLORY) / "missing-interpreter-%j.log"
    job_id = lab.sbatch_as(MALLORY, "--nodes=1", "--nodelist=node1", "--no-requeue", f"--output={out}",
                           script=f"#!{interpreter}\necho never\n")
    path = Path(str(out).replace("%j", job_id))
    text = await eventually(lambda: path.read_text() if path.exists() else "", lambda t: "execve" in t,
                            timeout=30, what="slurmstepd's execve error in mallory's output")
    assert "slurm_script" not in text, text  # never the spool's missing-script line
    verdict = classify_file(str(path))
    assert verdict.signatures[:1] == ("slurmstepd-bad-interpreter",), (verdict.signatures, text)
    assert not verdict.drain and not verdict.restart
