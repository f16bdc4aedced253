"""Log push on real Slurm: a file named like another user's job output cannot make goodput act on that job.

`goodput-alice` runs a job whose output goes to a shared, world-writable log directory (the layout
docs/log-push.md used to recommend). `goodput-mallory` writes `slurm-x-slurm-<alice's job>.out`
there, holding an Xid line that names the node of alice's allocation. The test is the shipper:
it tails the directory and takes the job id from the file name with a pattern anchored only at
its end (as the old documented configs did), then POSTs to the real push endpoint. In autonomous
mode, slurmctld's own log shows no drain and no requeue, and alice's job keeps running. The
positive control pushes alice's real output file, holding the same line, and goodput does act.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.detect.push import PushConfig
from goodput.models import IncidentKey, Mode, Outcome
from goodput.recover.incident import IncidentReport
from goodput.recover.policy import Policy
from goodput.scheduler import JobInfo, JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, result
from workers.client import TemporalIncidentService
from workers.push import PushServer
from workers.watch import IncidentSink
from workers.worker import build_worker

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

ALICE = "goodput-alice"
MALLORY = "goodput-mallory"
TOKEN = "push-token-for-the-lab-2"
XID = "Dec  1 09:00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
# The shipper's job-id pattern as docs/log-push.md showed it: anchored at the end only.
OLD_PATTERN = re.compile(r"slurm-(?P<job_id>\d+(?:_\d+)?)\.out$")
JOB = """#!/bin/bash
step=0
while true; do
  step=$((step + 1))
  echo "iteration $step/ 1000 | elapsed time per iteration (ms): 200.0"
  if [ "$step" = 5 ] && [ -n "{xid}" ]; then echo "{xid}"; fi
  sleep 0.2
done
"""
POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                verify_running_timeout_s=5, verify_progress_timeout_s=5, max_resume_attempts=1, evidence_only_wait_s=0)


def _shared_dir(lab: Lab) -> Path:
    shared = lab.dir / "work" / f"shared-{uuid.uuid4().hex[:8]}"
    shared.mkdir()
    shared.chmod(0o1777)  # /tmp-like: every user creates files, only the creator renames or removes them
    return shared


async def _alice_runs(lab: Lab, shared: Path, *, xid: bool) -> JobInfo:
    backend = SlurmCliBackend()
    script = JOB.replace("{xid}", XID.format(node="$(hostname -s)") if xid else "")
    job_id = lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--nodes=1", "--requeue",
                           f"--output={shared}/slurm-%j.out", script=script)
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=20, what="alice's job to run")
    assert job.user == ALICE and len(job.nodes) == 1 and job.stdout_path == f"{shared}/slurm-{job_id}.out"
    return job


def _write_as(user: str, path: Path, text: str) -> None:
    subprocess.run(["/usr/sbin/runuser", "-u", user, "--", "/bin/sh", "-c", 'printf "%s\\n" "$1" > "$2"', "sh",
                    text, str(path)], check=True, timeout=30, env={"PATH": "/usr/bin:/bin"})


def _ship(shared: Path, host: str) -> list[dict[str, str]]:
    """What a tail-and-regex shipper sends for every `slurm-*.out` of the directory."""
    records: list[dict[str, str]] = []
    for path in sorted(shared.glob("slurm-*.out")):
        match = OLD_PATTERN.search(str(path))
        if match is None:
            continue
        records += [{"log": line, "file": str(path), "job_id": match["job_id"], "hostname": host}
                    for line in path.read_text().splitlines()]
    return records


async def _push(client: Client, task_queue: str, records: list[dict[str, str]], job_id: str) -> IncidentReport:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    async with build_worker(client, task_queue, SlurmCliBackend(), RecordingNotifier(), policy=POLICY):
        sink = IncidentSink(TemporalIncidentService(client, task_queue), POLICY)
        async with PushServer(PushConfig(enabled=True, port=0, tokens=(TOKEN,)), sink, cluster) as server:
            async with httpx.AsyncClient(timeout=10) as http:
                response = await http.post(f"{server.url}/v1/logs", json=records,
                                           headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status_code == 200 and response.json()["anomalies"] == 1, response.text
            return await result(client, IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0).workflow_id)


async def test_mallorys_file_named_like_alices_output_moves_nothing(lab: Lab, client: Client, task_queue: str,
                                                                    records: SlurmRecords) -> None:
    shared = _shared_dir(lab)
    alice = await _alice_runs(lab, shared, xid=False)
    node = alice.nodes[0]
    forged = shared / f"slurm-x-slurm-{alice.job_id}.out"
    _write_as(MALLORY, forged, XID.format(node=node))
    shipped = [r for r in _ship(shared, node) if r["file"] == str(forged)]
    assert [r["job_id"] for r in shipped] == [alice.job_id]  # the shipper believed the name

    report = await _push(client, task_queue, shipped, alice.job_id)

    assert (records.drains(node), records.requeues(alice.job_id)) == ([], 0)  # as slurmctld logged it
    assert report.outcome is Outcome.RECOMMENDED_ONLY
    assert any("evidence only" in e.detail and str(forged) in e.detail for e in report.timeline), report.timeline
    assert "DRAIN" not in lab.node(node)["State"]
    after = await SlurmCliBackend().get_job(alice.job_id)
    assert after.state is JobState.RUNNING and after.restart_count == 0


async def test_alices_own_output_pushed_does_act(lab: Lab, client: Client, task_queue: str,
                                                 records: SlurmRecords) -> None:
    shared = _shared_dir(lab)
    alice = await _alice_runs(lab, shared, xid=True)
    node = alice.nodes[0]
    own = Path(alice.stdout_path)
    await eventually(lambda: _holds(own, "Xid"), bool, timeout=20, what="alice's job to print its Xid line")
    shipped = _ship(shared, node)
    assert {r["file"] for r in shipped} == {str(own)}

    await _push(client, task_queue, shipped, alice.job_id)

    assert len(records.drains(node)) == 1 and records.requeues(alice.job_id) >= 1


async def _holds(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except FileNotFoundError:  # slurmstepd opens it a moment after Slurm says RUNNING
        return False


@pytest.mark.parametrize("backend_name", ["slurm-cli", "slurm-rest"])
async def test_each_lab_backend_reports_the_output_path_the_check_compares_with(
        lab: Lab, backend_name: str, request: pytest.FixtureRequest) -> None:
    """The pushed `file` is compared with the job's StdOut as the backend reports it: every backend
    must report the expanded path scontrol prints, never Slurm 22.05's `%j` pattern (which could
    only ever make the job's own output evidence only)."""
    shared = _shared_dir(lab)
    alice = await _alice_runs(lab, shared, xid=False)
    backend: SlurmCliBackend | SlurmRestBackend = SlurmCliBackend()
    if backend_name == "slurm-rest":
        restd = request.getfixturevalue("slurmrestd")
        backend = SlurmRestBackend(restd.url, user=restd.user, token=restd.token, allow_http=True,
                                   fallback=SlurmCliBackend())
    try:
        job = await backend.get_job(alice.job_id)
    finally:
        if isinstance(backend, SlurmRestBackend):
            await backend.aclose()
    assert (job.stdout_path, job.stderr_path) == (alice.stdout_path, alice.stdout_path)
    assert job.user_id == alice.user_id is not None
