"""What goodput makes of NVRx's ft_launcher (0.7.0) lines, as the live detector sees them: in
batches, as the lines arrive. The lines are copied from the lab runs of tests/slurm/test_nvrx_e2e.py
(two nodes, one launcher each)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.detect.hang import HangConfig
from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine
from goodput.diagnose.attribution import attribute
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, IncidentKey, RestartEffect
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 12, 1, 13, 23, 0, tzinfo=UTC)
KEY = IncidentKey(cluster="lab", job_id="8", job_attempt=0)
RUNNING = JobInfo(job_id="8", name="train", state=JobState.RUNNING, nodes=("node1", "node2"))
P = "[INFO] [node{n}] [workload:?(?) infra:{r}(0)] "
HEARTBEAT = ("1: 2026-12-01 13:23:06,425 [WARNING] [node2] [workload:?(0) infra:1(0)] rank_monitor_server.py:497 "
             "[Cycle 0] Did not get subsequent heartbeat. Waited 8.00 seconds.")
KILLED = ("0: E1201 13:23:06.687000 25546 .venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/"
          "api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 25690) of binary: /work/main/.venv/bin/python")
RESTART = ("0: 2026-12-01 13:23:06,689 " + P.format(n=1, r=0)
           + "launcher.py:636 [default] Worker group FAILED. 1/1 attempts left; will restart worker group")
JOINING = ("1: 2026-12-01 13:12:34,469 " + P.format(n=2, r=1)
           + "launcher.py:636 [default] Joining cluster restart (group_rank=1)")
ROUND_CLOSED = ("1: 2026-12-01 13:12:34,480 " + P.format(n=2, r=1) + "ft_rendezvous_barrier.py:1372 [node2_9328_0] "
                "[Step 0] Round 0 closed (training in progress), waiting for next round...")
CLEAN_EXIT = [
    "0: 2026-12-01 13:12:57,716 " + P.format(n=1, r=0) + "launcher.py:672 [default] worker group successfully "
    "finished. Waiting 300 seconds for other agents to finish.",
    "0: 2026-12-01 13:12:58,790 " + P.format(n=1, r=0) + "ft_rendezvous_barrier.py:2991 The node 'node1_9325_0' has "
    "permanently closed the rendezvous '3'.",
    "0: 2026-12-01 13:13:01,852 " + P.format(n=1, r=0) + "launcher.py:3753 Agent exits with exit code = 0.",
]
NO_PROGRESS = ("1: 2026-12-01 13:26:36,609 [WARNING] [node2] [workload:?(?) infra:1(0)] progress_tracker.py:224 "
               "Training cycle #1 made NO progress: 5 → 5 (0 iterations, need 1). Consecutive cycles without "
               "progress: 1/2")
EARLY_TERMINATION = ("1: 2026-12-01 13:26:36,609 [ERROR] [node2] [workload:?(?) infra:1(0)] progress_tracker.py:248 "
                     "EARLY TERMINATION: 1 consecutive training cycles without progress (threshold: 1).")


def lines(*texts: str, start: int = 0) -> list[LogLine]:
    return [LogLine(path="/lab/out-8.log", offset=(start + i) * 200, line_no=start + i + 1, text=t, observed_at=T0)
            for i, t in enumerate(texts)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_launchers_kill_in_a_later_batch_is_the_hang_not_an_oom() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    first = detector.feed(lines(HEARTBEAT), at(6.4), at(6.4))
    later = detector.feed(lines(KILLED, RESTART, start=1), at(6.8), at(6.8))
    assert [a.category for a in later] == [Category.OOM]  # alone, a -9 looks like the OOM killer
    attribution = attribute([*first, *later], RUNNING)
    assert attribution.category is Category.HANG and attribution.restart_effect is RestartEffect.IN_JOB
    assert not attribution.restart and not attribution.drain


PEER_EXIT = ("1: E1201 13:23:07.101000 25546 .venv/lib/python3.11/site-packages/torch/distributed/elastic/"
             "multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 25701) of binary: /usr/bin/python")


def test_the_peers_exit_code_after_the_launchers_kill_is_its_consequence() -> None:
    """The surviving rank loses its peer and exits 1; its launcher reports that. srun may forward it
    a moment before the other node's timeout line. Either way, it is the kill's consequence."""
    peer = LiveLogDetector.start(KEY, T0).feed(lines(PEER_EXIT), at(5.0), at(5.0))
    assert attribute(peer, RUNNING).category is Category.APP_ERROR  # alone, an exit code 1 is the program's
    timeout = LiveLogDetector.start(KEY, T0).feed(lines(HEARTBEAT, KILLED, RESTART, start=10), at(7.5), at(7.5))
    attribution = attribute([*peer, *timeout], RUNNING)
    assert attribution.category is Category.HANG and attribution.restart_effect is RestartEffect.IN_JOB


def test_an_in_job_restart_starts_the_step_count_over() -> None:
    # launcher_s=0: the step count alone (waiting for the launcher is tests/unit/test_hang_rhythm.py's)
    hang = HangConfig(k=5, floor_s=10, startup_grace_s=60, launcher_s=0)
    detector = LiveLogDetector.start(KEY, T0, hang=hang)
    for step in range(1, 10):
        detector.feed(lines(f"0: iteration {step}/ 400 | loss 0.2 | elapsed time per iteration (ms): 200.0",
                            start=step), at(step * 0.2), at(step * 0.2))
    detector.feed(lines(RESTART, start=20), at(3), at(3))
    for step in range(6, 9):  # replayed from the checkpoint at step 5: below the last step seen
        detector.feed(lines(f"0: iteration {step}/ 400 | loss 0.2 | elapsed time per iteration (ms): 200.0",
                            start=20 + step), at(20 + step), at(20 + step))
    assert detector.tick(at(35)) == []  # 7 s after the last replayed step: progressing
    assert detector.state.progress.last_step == 8
    [hung] = detector.tick(at(40))
    assert hung.kind is AnomalyKind.HANG


def test_lines_of_a_clean_multi_node_run_open_nothing() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    assert detector.feed(lines(ROUND_CLOSED, *CLEAN_EXIT), at(60), at(60)) == []


def test_a_cycle_without_progress_is_a_warning_not_the_verdict() -> None:
    [restarted] = LiveLogDetector.start(KEY, T0).feed(lines(NO_PROGRESS, JOINING), at(36), at(36))
    assert restarted.restart_effect is RestartEffect.IN_JOB
    [ended] = LiveLogDetector.start(KEY, T0).feed(lines(NO_PROGRESS, EARLY_TERMINATION), at(36), at(36))
    assert ended.restart_effect is RestartEffect.NEVER and "nvrx-no-progress" in ended.signature_ids


def in_job(n: int) -> Anomaly:
    return Anomaly(id=f"a{n}", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, job_id="8", observed_at=at(n),
                   detected_at=at(n), restart_effect=RestartEffect.IN_JOB, category=Category.APP_ERROR)


def test_once_the_job_ended_its_launcher_restarts_nothing() -> None:
    evidence = [in_job(0), in_job(1)]
    assert attribute(evidence, RUNNING).restart_effect is RestartEffect.IN_JOB
    failed = attribute(evidence, RUNNING.model_copy(update={"state": JobState.FAILED}))
    assert failed.restart_effect is RestartEffect.GAVE_UP and "has since ended (FAILED)" in failed.explanation
    assert attribute(evidence, None).restart_effect is RestartEffect.IN_JOB  # no record: the lines decide


def test_never_says_who_asked() -> None:
    [verdict] = LiveLogDetector.start(KEY, T0).feed(lines(EARLY_TERMINATION), at(36), at(36))
    attribution = attribute([in_job(0), verdict], RUNNING)
    assert attribution.restart_effect is RestartEffect.NEVER
    assert "nvrx-no-progress: NVRx saw restart cycles make no training progress" in attribution.explanation
