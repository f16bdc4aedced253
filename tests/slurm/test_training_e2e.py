"""End to end: goodput keeps a real PyTorch DDP job training on the local Slurm cluster.

A 2-node x 2-rank CPU training job (tests/slurm/train_ddp.py: gloo, DCP checkpoints every 5 steps,
a progress line per step) runs under Slurm; goodput's service runs against the lab in autonomous
mode with its real watchers, catalogue, CLI backend and checkpoint discovery. Each scenario
injects one fault and checks the whole story in the incident's report (the Temporal history).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.checkpoints import CheckpointConfig, to_comment
from goodput.detect.hang import HangConfig
from goodput.detect.watch import WatchClusterInput
from goodput.models import Category, IncidentKey, Mode
from goodput.ownership import owning_incident
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.required import require_module
from tests.workflows.helpers import ACTS_ALONE, result
from tests.workflows.test_watchers import incident_appears
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

require_module("torch", "`make test` installs the e2e extra")

TRAIN = Path(__file__).with_name("train_ddp.py")
SCRIPT = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=2 --requeue --open-mode=append
export CKPT_ROOT={ckpt} FAULT_DIR={faults} STEPS=2000 CKPT_EVERY=5 FAULT_AFTER={fault_after} STEP_SLEEP=0.2
export PYTHONPATH={repo}
srun -l {python} {train}
"""


class Scenario:
    def __init__(self, lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
        self.lab, self.client, self.task_queue = lab, client, task_queue
        tmp_path.chmod(0o755)
        self.tmp = tmp_path
        self.ckpt = tmp_path / "ckpt"
        self.faults = tmp_path / "faults"
        self.faults.mkdir()
        self.cluster = f"e2e{uuid.uuid4().hex[:6]}"
        self.backend = SlurmCliBackend()

    def submit(self, fault_after: int = 12) -> str:
        script = self.tmp / "train.sbatch"
        script.write_text(SCRIPT.format(ckpt=self.ckpt, faults=self.faults, fault_after=fault_after,
                                        repo=Path(__file__).resolve().parents[2], python=sys.executable, train=TRAIN))
        comment = f"goodput:opt-in {to_comment(CheckpointConfig(layout='dcp', root=str(self.ckpt), settle_s=0))}"
        return self.lab.sbatch(f"--output={self.tmp}/out-%j.log", f"--chdir={self.tmp}", f"--comment={comment}",
                               str(script))

    async def run(self, policy: Policy, fault: str, fault_after: int = 12) -> tuple[str, IncidentReport]:
        async with build_worker(self.client, self.task_queue, self.backend, RecordingNotifier(), policy=policy):
            await start_cluster_watch(self.client, self.task_queue, WatchClusterInput(
                cluster=self.cluster, poll_interval_s=0.5, log_poll_interval_s=0.1,
                # A 30 s floor once the rhythm is learned, 45 s before. With 4 s and then 15 s, a loaded CI
                # machine twice ended this test with two restarts where one was expected (the cause was not
                # recorded; the test now tells a second hang apart from Slurm's own requeue). The hung rank
                # is silent for good, so detection still holds.
                hang=HangConfig(k=5, floor_s=30, startup_grace_s=120, unlearned_s=45)))
            job_id = self.submit(fault_after)
            (self.faults / f"fault-{job_id}-0").write_text(fault)
            key = IncidentKey(cluster=self.cluster, job_id=job_id, job_attempt=0)
            await incident_appears(self.client, key, timeout_s=150)
            report = await result(self.client, key.workflow_id)
            await self.client.get_workflow_handle(cluster_watch_id(self.cluster)).terminate("scenario over")
        return job_id, report

    async def later_incidents(self, job_id: str) -> dict[int, IncidentReport | str]:
        """Incidents goodput opened on the job's later attempts: each one's report once it ended,
        else its status."""
        found: dict[int, IncidentReport | str] = {}
        for attempt in range(1, 4):
            key = IncidentKey(cluster=self.cluster, job_id=job_id, job_attempt=attempt)
            try:
                described = await self.client.get_workflow_handle(key.workflow_id).describe()
            except RPCError:
                continue
            done = described.status is WorkflowExecutionStatus.COMPLETED
            found[attempt] = await result(self.client, key.workflow_id) if done else str(described.status)
        return found

    async def story(self, job_id: str, report: IncidentReport,
                    later: dict[int, IncidentReport | str] | None = None) -> str:
        """What a failed assertion needs to say why: this incident's timeline, any later attempt's
        incident (`later`, when the caller already read them), the nodes as Slurm sees them, and the
        job's own output with its time stamps."""
        lines = timeline(report)
        for attempt, other in (later if later is not None else await self.later_incidents(job_id)).items():
            lines.append(f"-- attempt {attempt}'s incident --")
            lines += timeline(other) if isinstance(other, IncidentReport) else [other]
        for name in ("node1", "node2", "node3", "node4"):
            node = self.lab.node(name)
            lines.append(f"{name}: {node.get('State')} {node.get('Reason', '')}")
        return "\n".join([*lines, "-- job output --", self.output(job_id)[-6000:]])

    def output(self, job_id: str) -> str:
        path = self.tmp / f"out-{job_id}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def timeline(report: IncidentReport) -> list[str]:
    return [f"{e.at:%H:%M:%S} {e.state.value}: {e.detail}" for e in report.timeline]


def policy(**overrides: object) -> Policy:
    return Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=1.0, linger_s=0, verify_poll_interval_s=0.5,
                  verify_running_timeout_s=120, verify_progress_timeout_s=120, max_resume_attempts=1).model_copy(
        update=overrides)


def steps_in(text: str, step: int) -> bool:
    return f"iteration {step}/ 2000" in text


async def test_xid_on_node2_drains_it_and_resumes_elsewhere_from_the_last_checkpoint(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    s = Scenario(lab, client, task_queue, tmp_path)
    job_id, report = await s.run(policy(resume=ResumeStrategy.RESUBMIT), "xid:3")
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.attribution is not None and report.attribution.category is Category.GPU_HARDWARE
    assert report.attribution.culprit_nodes == ("node2",)
    assert owning_incident(lab.node("node2")["Reason"]) == report.incident_id
    assert report.checkpoint is not None and report.checkpoint.step == 10
    new_id = report.resumed_job_id
    assert new_id and new_id != job_id
    new_job = await s.backend.get_job(new_id)
    assert "node2" not in new_job.nodes and "node2" in new_job.excluded_nodes
    await eventually(lambda: _text(s, new_id), lambda t: "resumed from" in t and "step 10" in t, timeout=30,
                     what="the resubmitted job resuming from step 10")
    assert report.lost_work is not None and report.lost_work.iterations >= 2
    assert any("past checkpoint step 10" in e.detail for e in report.timeline)


async def test_a_python_exception_blames_the_application_and_drains_nothing(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    s = Scenario(lab, client, task_queue, tmp_path)
    job_id, report = await s.run(policy(), "exception:3")
    assert report.state is IncidentState.STOPPED, report.timeline
    assert report.attribution is not None and report.attribution.category is Category.APP_ERROR
    assert not report.attribution.drain and report.attribution.culprit_nodes == ()
    assert "application" in report.attribution.explanation
    assert all("DRAIN" not in lab.node(n)["State"] for n in ("node1", "node2", "node3", "node4"))
    assert (await s.backend.get_job(job_id)).restart_count == 0


async def test_a_hung_rank_is_detected_and_the_job_requeued(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    s = Scenario(lab, client, task_queue, tmp_path)
    job_id, report = await s.run(policy(resume=ResumeStrategy.REQUEUE), "hang:3")
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.attribution is not None and report.attribution.category is Category.HANG
    assert sum(e.detail.startswith("requeued") for e in report.timeline) == 1, report.timeline
    again = await s.backend.get_job(job_id)
    assert again.restart_count >= 1 and again.state is JobState.RUNNING, await s.story(job_id, report)
    # One hang, one requeue by goodput. Slurm may requeue the job again by itself (a lab slurmd too
    # slow to answer its ping on a loaded machine marks the node down): not goodput's doing, but a
    # second hang found on the resumed attempt would be, and fails here with the whole story.
    if again.restart_count > 1:
        later = await s.later_incidents(job_id)
        assert not any(isinstance(r, IncidentReport) and r.attribution is not None
                       and r.attribution.category is Category.HANG for r in later.values()), \
            await s.story(job_id, report, later)
    assert report.checkpoint is not None and any("past checkpoint" in e.detail for e in report.timeline)


async def test_a_truncated_newest_checkpoint_is_skipped_for_the_previous_valid_one(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    s = Scenario(lab, client, task_queue, tmp_path)
    _job_id, report = await s.run(policy(resume=ResumeStrategy.RESUBMIT), "truncate-then-xid:3", fault_after=16)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.checkpoint is not None and report.checkpoint.step == 10  # step-15 was truncated
    assert any("step-15" in e.detail for e in report.timeline)
    assert steps_in(s.output(report.resumed_job_id or ""), 11)


async def _text(s: Scenario, job_id: str) -> str:
    return s.output(job_id)
