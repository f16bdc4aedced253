"""Megatron-LM's rerun state machine and Lightning's SLURM integration, in their own words and
their wordings across versions: a result another GPU reproduces is the application's, one the same
GPU does not is a transient fault named by rank and host (never a drain), a Lightning job that
requeued itself is not requeued again, and a Trainer that disagrees with its allocation is the job's."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import anomaly_from_verdict, classify_lines, render_text
from goodput.diagnose.signatures import Signature, default_catalogue
from goodput.diagnose.signatures.verdict import Verdict
from goodput.models import ActionKind, Attribution, Category, Mode
from goodput.recover.policy import Policy, plan_recovery
from goodput.scheduler import JobInfo, JobState
from tests.unit.signature_cases import check_line_case

FRAMEWORK_LINES: list[tuple[str, str, dict[str, str]]] = [
    # Megatron core_v0.16+ (with the iteration) and core_v0.10-0.15 (without it).
    ("Rank 12, node dgx-b07, device 4, iteration #1201: Correct result (but possible Application error) "
     "(found NaN in local forward loss calculation)!", "megatron-rerun-correct-result", {}),
    ("[NeMo E 2026-03-02 10:11:12 rerun_state_machine:512] Rank 3, node gpu-a1, device 3: Correct result (but "
     "possible Application error) (Spiky loss)!", "megatron-rerun-correct-result", {}),
    ("Rank 12, node dgx-b07, device 4, iteration #1201: Possible transient error!!",
     "megatron-rerun-transient-error", {"rank": "12", "host": "dgx-b07"}),
    ("Rank 7, node ip-10-1-2-3, device 7: Possible transient error!!", "megatron-rerun-transient-error",
     {"rank": "7", "host": "ip-10-1-2-3"}),
    ("Rank 12, node dgx-c11, device 1, iteration #1201: Possible persistent error!!",
     "megatron-rerun-persistent-error", {}),
    ("Rank 12, node dgx-b07, device 4, iteration #1201: First rerun: unexpected result is reproducible within the "
     "tolerance (tensor(nan, device='cuda:4') = tensor(nan, device='cuda:4')). Need to rerun on a different GPU to "
     "verify correctness.!", "megatron-rerun-suspect", {"host": "dgx-b07"}),
    ("Got rescheduled on the same GPU. Need to resume again from the same checkpoint (node: dgx-b07, gpu: 4)",
     "megatron-rerun-suspect", {"peer": "dgx-b07"}),
    ("Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration "
     "and establish a diagnostic", "megatron-rerun-elsewhere", {}),
    ("[NeMo W 2026-03-02 10:11:12 rerun_state_machine:330] Exiting now. Please resume the job from the same "
     "checkpoint to rerun the last iteration and establish a diagnostic", "megatron-rerun-elsewhere", {}),
    ("[rank: 3] Child process with PID 81234 terminated with code -9. Forcefully terminating all other processes "
     "to avoid zombies \N{ZOMBIE}", "lightning-child-sigkill", {"detail": "3"}),
    ("[rank: 2] Child process with PID 81233 terminated with code 1. Forcefully terminating all other processes "
     "to avoid zombies \N{ZOMBIE}", "lightning-child-terminated", {"detail": "2", "exitcode": "1"}),
    ("Requeued SLURM job: 4242", "lightning-auto-requeued", {}),
    ("requeued exp 4242_7", "lightning-auto-requeued", {}),
    ("ValueError: You set `devices=8` in Lightning, but the number of tasks per node configured in SLURM "
     "`--ntasks-per-node=4` does not match. HINT: Set `devices=4`.", "lightning-slurm-config-mismatch", {}),
    ("ValueError: You set `num_nodes=2` in Lightning, but the number of nodes configured in SLURM `--nodes=4` "
     "does not match. HINT: Set `num_nodes=4`.", "lightning-slurm-config-mismatch", {}),
    ("RuntimeError: You set `--ntasks=16` in your SLURM bash script, but this variable is not supported. HINT: Use "
     "`--ntasks-per-node=16` instead.", "lightning-slurm-config-mismatch", {}),
    ("ValueError: You set `devices=8` and `num_nodes=2` in Lightning, but the product (8 * 2) does not match the "
     "world size (8).", "lightning-slurm-config-mismatch", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), FRAMEWORK_LINES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(FRAMEWORK_LINES)])
def test_framework_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


def test_megatrons_transient_error_restarts_on_the_named_host_without_a_drain() -> None:
    verdict = classify_lines([
        "Rank 12, node dgx-b07, device 4, iteration #1201: Unexpected result tensor(nan, device='cuda:4') on "
        "rank 12 at iteration #1201 invocation #1 (message='found NaN in local forward loss calculation')",
        "Rank 12, node dgx-b07, device 4, iteration #1201: First rerun: unexpected result is not reproducible "
        "within the tolerance (tensor(2.31, device='cuda:4') != tensor(nan, device='cuda:4'))!",
        "Rank 12, node dgx-b07, device 4, iteration #1201: Possible transient error!!",
        "Exiting now. The job can be resumed from a previous checkpoint",
    ])
    assert (verdict.category, verdict.restart, verdict.drain) == (Category.GPU_HARDWARE, True, False)
    assert (verdict.rank, verdict.host) == (12, "dgx-b07")
    assert verdict.confidence != "high"


FIRST_RUN = [
    "Rank 12, node dgx-b07, device 4, iteration #1201: Unexpected result tensor(nan, device='cuda:4') on rank 12 at "
    "iteration #1201 invocation #1 (message='found NaN in local forward loss calculation')",
    "Rank 12, node dgx-b07, device 4, iteration #1201: First rerun: unexpected result is reproducible within the "
    "tolerance (tensor(nan, device='cuda:4') = tensor(nan, device='cuda:4')). Need to rerun on a different GPU to "
    "verify correctness.!",
    "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration and "
    "establish a diagnostic",
]
SECOND_RUN = [
    "Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect "
    "(tensor(2.31, device='cuda:1') != tensor(nan, device='cuda:4'))",
    "Rank 12, node dgx-c11, device 1, iteration #1201: Possible persistent error!!",
    "Exiting now. A checkpoint at the last iteration already exists if further examination is needed",
]


RESCHEDULED = "Got rescheduled on the same GPU. Need to resume again from the same checkpoint (node: dgx-b07, gpu: 4)"


@pytest.mark.parametrize("suspect", [FIRST_RUN[1], RESCHEDULED])
def test_megatrons_persistent_error_drains_the_suspect_not_the_host_that_printed_it(suspect: str) -> None:
    verdict = classify_lines([suspect, *SECOND_RUN])
    assert (verdict.category, verdict.drain, verdict.restart, verdict.host) == (
        Category.GPU_HARDWARE, True, True, "dgx-b07")
    assert verdict.confidence != "high"


def test_megatrons_persistent_error_without_its_suspect_drains_nothing() -> None:
    verdict = classify_lines(SECOND_RUN)
    assert (verdict.category, verdict.drain, verdict.restart) == (Category.GPU_HARDWARE, False, True)
    assert verdict.host != "dgx-c11"


AGAIN_ON_THE_SUSPECT = [
    RESCHEDULED,
    "Need to restart job from the same checkpoint because it was scheduled on the same node/GPU",
    "Exiting now. Please resume the job from the same checkpoint to rerun the last iteration and establish a "
    "diagnostic",
]


@pytest.mark.parametrize("run", [FIRST_RUN, AGAIN_ON_THE_SUSPECT], ids=["first-rerun", "rescheduled"])
def test_megatrons_exit_to_rerun_elsewhere_restarts_away_from_the_suspect_without_a_drain(run: list[str]) -> None:
    verdict = classify_lines(run)
    assert (verdict.category, verdict.restart, verdict.drain, verdict.exclude, verdict.host) == (
        Category.GPU_HARDWARE, True, False, True, "dgx-b07")
    assert verdict.confidence != "high"  # nothing is decided until the step runs on another GPU
    assert "restart:    yes, away from dgx-b07 (not drained)" in render_text("train.log", verdict)
    plan = plan_recovery(attributed(verdict, ("dgx-b07", "dgx-c11"), source="dgx-c11"), JOB,
                         Policy(mode=Mode.AUTONOMOUS))
    [requeue] = [a for a in plan.actions if a.kind is ActionKind.REQUEUE]
    assert requeue.exclude == ("dgx-b07",) and not plan.nodes_to_drain()
    assert "exclude dgx-b07" in plan.rationale


def test_megatrons_exit_without_its_suspect_restarts_and_excludes_nothing() -> None:
    verdict = classify_lines(FIRST_RUN[2:])
    assert (verdict.category, verdict.restart, verdict.drain, verdict.exclude) == (
        Category.GPU_HARDWARE, True, False, False)
    # live, the anomaly names the host whose log it read (rank 0's, which printed the exit line)
    attribution = attributed(verdict, ("dgx-b07", "dgx-c11"), source="dgx-c11")
    assert attribution.restart and attribution.exclude == ()


def test_a_suspect_outside_the_jobs_allocation_is_never_excluded() -> None:
    # the host comes from the job's own output: only a node Slurm lists for the job is acted on
    attribution = attributed(classify_lines(FIRST_RUN), ("dgx-c11", "dgx-c12"))
    assert attribution.exclude == () and attribution.unverified_nodes == ("dgx-b07",)
    plan = plan_recovery(attribution, JOB, Policy(mode=Mode.AUTONOMOUS))
    assert all(a.exclude == () for a in plan.actions)


def test_the_whole_story_ends_in_the_persistent_errors_drain() -> None:
    verdict = classify_lines([*FIRST_RUN, *SECOND_RUN])
    assert (verdict.drain, verdict.exclude, verdict.host) == (True, False, "dgx-b07")


def test_a_rule_that_excludes_must_restart_and_never_drain() -> None:
    rule = default_catalogue().get("megatron-rerun-elsewhere-from-suspect")
    assert rule is not None and rule.exclude
    for change in ({"drain": True}, {"restart": False}):
        with pytest.raises(ValidationError, match="exclude means restart elsewhere"):
            Signature.model_validate({**rule.model_dump(), **change})


JOB = JobInfo(job_id="77", state=JobState.FAILED, nodes=("dgx-b07", "dgx-c11"), requeue=True)


def attributed(verdict: Verdict, nodes: tuple[str, ...], source: str | None = None) -> Attribution:
    now = datetime(2026, 12, 5, tzinfo=UTC)
    anomaly = anomaly_from_verdict(verdict, anomaly_id="a", job_id="77", observed_at=now, detected_at=now,
                                   host=source)
    return attribute([anomaly], JOB.model_copy(update={"nodes": nodes}))


def test_a_self_requeued_lightning_job_is_not_requeued_again() -> None:
    verdict = classify_lines([
        "SLURM auto-requeueing enabled. Setting signal handlers.",
        "Epoch 3:  41%|####      | 410/1000 [1:58:01<2:49:50, 17.27s/it, v_num=0]",
        "Handling auto-requeue signal: 10",
        "requeing job 4242...",
        "Requeued SLURM job: 4242",
        "slurmstepd: error: *** JOB 4242 ON gpu-a1 CANCELLED AT 2026-03-02T10:11:12 DUE TO JOB REQUEUE ***",
    ])
    assert (verdict.category, verdict.restart, verdict.drain) == (Category.SCHEDULER_POLICY, False, False)


def test_deepspeeds_exit_line_names_no_rank() -> None:
    # launch.py quotes the command of the last child it spawned, whichever child died.
    verdict = classify_lines([
        "[INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266",
        "[INFO] [launch.py:428:sigkill_handler] Killing subprocess 13267",
        "[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=1'] exits with "
        "return code = -9",
    ])
    assert verdict.category is Category.OOM and verdict.rank is None


def test_lightnings_launcher_names_the_local_rank_of_a_single_node_log() -> None:
    verdict = classify_lines([
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4",
        "[rank: 3] Child process with PID 81234 terminated with code -9. Forcefully terminating all other "
        "processes to avoid zombies \N{ZOMBIE}",
    ])
    assert (verdict.category, verdict.restart, verdict.drain, verdict.rank) == (Category.OOM, False, False, 3)
