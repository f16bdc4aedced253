"""Never double-restart: what the job's launcher did about a failure decides what goodput does.

`goodput classify` honoured in-job restarts, NVRx's exit 93 and user cancels per log, but the live
path re-derived "restart?" from each incident's lead signature, so a job torchrun or ft_launcher
had already restarted in-job could be requeued (or, the plan saying "no restart" for an active
job, stopped) by goodput as well. Now each anomaly carries the restart effect of its lines, the
incident weighs them in the order they were seen, and the plan acts on the result.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine
from goodput.diagnose.attribution import attribute, effect_of, net_effect
from goodput.models import ActionKind, Anomaly, AnomalyKind, AnomalySource, Category, IncidentKey, RestartEffect
from goodput.recover.policy import Policy, plan_recovery
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
KEY = IncidentKey(cluster="lab", job_id="42", job_attempt=0)
RUNNING = JobInfo(job_id="42", name="train", state=JobState.RUNNING, nodes=("n1", "n2"))
# A cause goodput would restart the job for (a GPU that fell off the bus).
CRASH = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
IN_JOB = "[default0]:Worker group FAILED. 2/3 attempts left; will restart worker group"
GAVE_UP = "Some rank(s) exited with non-zero exit code: [1]. Agent's exit code = 1"
EXIT_93 = "Agent's exit code = 93"


def anomaly(n: int, effect: RestartEffect = RestartEffect.NONE, **kw: Any) -> Anomaly:
    at = T0 + timedelta(seconds=n)
    return Anomaly(id=f"a{n}", source=AnomalySource.LOG, kind=kw.pop("kind", AnomalyKind.CRASH), job_id="42",
                   observed_at=at, detected_at=at, restart_effect=effect, **kw)


def kinds(plan_actions: tuple[Any, ...]) -> list[ActionKind]:
    return [a.kind for a in plan_actions]


def test_an_in_job_restart_after_the_crash_means_no_restart_and_no_stop() -> None:
    evidence = [anomaly(0, category=Category.UNKNOWN), anomaly(1, RestartEffect.IN_JOB)]
    attribution = attribute(evidence, RUNNING)
    assert attribution.restart_effect is RestartEffect.IN_JOB and not attribution.restart
    assert "double restart" in attribution.explanation
    plan = plan_recovery(attribution, RUNNING, Policy())
    assert kinds(plan.actions) == [ActionKind.NOTIFY]
    assert "restarted in-job" in plan.rationale


def test_the_launcher_giving_up_later_hands_the_restart_back_to_goodput() -> None:
    evidence = [anomaly(0), anomaly(1, RestartEffect.IN_JOB), anomaly(2, RestartEffect.GAVE_UP)]
    attribution = attribute(evidence, RUNNING)
    assert attribution.restart_effect is RestartEffect.GAVE_UP and attribution.restart
    assert ActionKind.REQUEUE in kinds(plan_recovery(attribution, RUNNING, Policy()).actions)


def test_a_later_in_job_restart_counts_again() -> None:
    evidence = [anomaly(2, RestartEffect.IN_JOB), anomaly(1, RestartEffect.GAVE_UP), anomaly(0)]
    assert net_effect(evidence) is RestartEffect.IN_JOB


def test_never_stands_even_against_a_site_that_restarts_application_errors() -> None:
    evidence = [anomaly(0, category=Category.APP_ERROR), anomaly(1, RestartEffect.NEVER),
                anomaly(2, RestartEffect.IN_JOB)]
    attribution = attribute(evidence, RUNNING)
    assert attribution.restart_effect is RestartEffect.NEVER and not attribution.restart
    plan = plan_recovery(attribution, RUNNING, Policy(restart_on_app_error=True))
    assert ActionKind.REQUEUE not in kinds(plan.actions) and ActionKind.RESUBMIT not in kinds(plan.actions)
    assert ActionKind.STOP_JOB in kinds(plan.actions)  # exit 93 asked for the job to end


def test_a_hardware_fault_restarted_in_job_still_drains_the_node() -> None:
    evidence = [anomaly(0, kind=AnomalyKind.GPU_FAULT, category=Category.GPU_HARDWARE, nodes=("n2",),
                        signature_ids=("xid-79",)),
                anomaly(1, RestartEffect.IN_JOB)]
    attribution = attribute(evidence, RUNNING)
    plan = plan_recovery(attribution, RUNNING, Policy())
    assert kinds(plan.actions) == [ActionKind.DRAIN_NODES, ActionKind.NOTIFY]
    assert plan.actions[0].nodes == ("n2",)


def test_evidence_carrying_only_signature_ids_implies_its_effect() -> None:
    pushed = anomaly(0, signature_ids=("elastic-restart-worker-group",))
    assert effect_of(pushed) is RestartEffect.IN_JOB
    both = anomaly(1, signature_ids=("elastic-restart-worker-group", "nvrx-gave-up"))
    assert effect_of(both) is RestartEffect.GAVE_UP  # order unknown: restart, as before
    assert effect_of(anomaly(2, signature_ids=("nvrx-exit-93", "elastic-restart-worker-group"))) \
        is RestartEffect.NEVER


def lines(*texts: str, start: int = 0) -> list[LogLine]:
    return [LogLine(path="/logs/42.out", offset=(start + i) * 100, line_no=start + i + 1, text=t, observed_at=T0)
            for i, t in enumerate(texts)]


def test_the_live_detector_reports_a_batch_that_only_restarts_in_job() -> None:
    detector = LiveLogDetector.start(KEY, T0)
    [crash] = detector.feed(lines(CRASH), T0, T0)
    assert crash.restart_effect is RestartEffect.NONE
    [restarted] = detector.feed(lines(IN_JOB, start=1), T0 + timedelta(seconds=1), T0 + timedelta(seconds=1))
    assert restarted.restart_effect is RestartEffect.IN_JOB
    assert not attribute([crash, restarted], RUNNING).restart
    [gave_up] = detector.feed(lines(GAVE_UP, start=2), T0 + timedelta(seconds=9), T0 + timedelta(seconds=9))
    assert gave_up.restart_effect is RestartEffect.GAVE_UP
    assert attribute([crash, restarted, gave_up], RUNNING).restart


def test_one_batch_nets_its_own_order() -> None:
    [anomaly_] = LiveLogDetector.start(KEY, T0).feed(lines(CRASH, IN_JOB, EXIT_93), T0, T0)
    assert anomaly_.restart_effect is RestartEffect.NEVER
    [anomaly_] = LiveLogDetector.start(KEY, T0).feed(lines(CRASH, IN_JOB), T0, T0)
    assert anomaly_.restart_effect is RestartEffect.IN_JOB
