"""plan_recovery: what each attribution leads to, and the blast-radius guard."""

from __future__ import annotations

import pytest

from goodput.models import ActionKind, Attribution, Category, Culprit, CulpritKind, Mode
from goodput.recover.policy import Policy, ResumeStrategy, governing_mode, plan_recovery
from goodput.scheduler import JobInfo, JobState

JOB = JobInfo(job_id="7", state=JobState.FAILED, partition="gpu",
              nodes=tuple(f"node{i}" for i in range(1, 9)))


def blame(*nodes: str, category: Category = Category.GPU_HARDWARE, restart: bool = True,
          drain: bool = True) -> Attribution:
    return Attribution(category=category, restart=restart, drain=drain, explanation="because",
                       culprits=tuple(Culprit(kind=CulpritKind.NODE, id=n, confidence=0.9) for n in nodes))


def kinds(plan_actions: object) -> list[ActionKind]:
    return [a.kind for a in plan_actions]  # type: ignore[attr-defined]


def test_hardware_fault_drains_then_requeues() -> None:
    plan = plan_recovery(blame("node3"), JOB, Policy())
    assert kinds(plan.actions) == [ActionKind.DRAIN_NODES, ActionKind.REQUEUE, ActionKind.NOTIFY]
    assert plan.nodes_to_drain() == ("node3",)
    assert not plan.blocked_by_blast_radius


def test_resubmit_strategy_excludes_drained_nodes() -> None:
    plan = plan_recovery(blame("node3"), JOB, Policy(resume=ResumeStrategy.RESUBMIT))
    resubmit = [a for a in plan.actions if a.kind is ActionKind.RESUBMIT]
    assert resubmit and resubmit[0].exclude == ("node3",)


def test_application_error_drains_nothing_and_does_not_restart() -> None:
    attribution = Attribution(category=Category.APP_ERROR, restart=False, drain=False,
                              culprits=(Culprit(kind=CulpritKind.APP, id="train.py", confidence=0.8),))
    plan = plan_recovery(attribution, JOB, Policy())
    assert plan.nodes_to_drain() == ()
    assert not plan.has(ActionKind.REQUEUE) and not plan.has(ActionKind.RESUBMIT)


def test_application_error_restarts_when_policy_says_so() -> None:
    attribution = Attribution(category=Category.APP_ERROR, restart=False, drain=False)
    plan = plan_recovery(attribution, JOB, Policy(restart_on_app_error=True))
    assert plan.has(ActionKind.REQUEUE) and plan.nodes_to_drain() == ()


def test_stop_job_only_when_job_still_active() -> None:
    attribution = Attribution(category=Category.OOM, restart=False, drain=False)
    running = JOB.model_copy(update={"state": JobState.RUNNING})
    assert plan_recovery(attribution, running, Policy()).has(ActionKind.STOP_JOB)
    assert not plan_recovery(attribution, JOB, Policy()).has(ActionKind.STOP_JOB)


@pytest.mark.parametrize(("nodes", "policy", "blocked"), [
    (("node1", "node2"), Policy(max_drain_nodes_per_incident=2), False),
    (("node1", "node2", "node3"), Policy(max_drain_nodes_per_incident=2), True),
    (("node1",), Policy(max_drain_nodes_per_incident=0), True),
    (("node1", "node2"), Policy(max_drain_nodes_per_incident=8, max_drain_fraction_of_job=0.2), True),
])
def test_blast_radius(nodes: tuple[str, ...], policy: Policy, blocked: bool) -> None:
    plan = plan_recovery(blame(*nodes), JOB, policy)
    assert plan.blocked_by_blast_radius is blocked
    if blocked:
        assert plan.nodes_to_drain() == ()
        assert kinds(plan.actions) == [ActionKind.NOTIFY]


def test_the_one_bad_node_of_a_small_job_may_always_be_drained() -> None:
    one_node_job = JOB.model_copy(update={"nodes": ("node1",)})
    plan = plan_recovery(blame("node1"), one_node_job, Policy(max_drain_fraction_of_job=0.25))
    assert not plan.blocked_by_blast_radius and plan.nodes_to_drain() == ("node1",)
    two_of_two = plan_recovery(blame("node1", "node2"), JOB.model_copy(update={"nodes": ("node1", "node2")}),
                               Policy(max_drain_fraction_of_job=0.5))
    assert two_of_two.blocked_by_blast_radius


def test_duplicate_culprits_count_once() -> None:
    plan = plan_recovery(blame("node1", "node1"), JOB, Policy(max_drain_nodes_per_incident=1))
    assert plan.nodes_to_drain() == ("node1",)


def test_partition_modes_override_the_default() -> None:
    policy = Policy(mode=Mode.MONITOR, partition_modes={"trusted": Mode.AUTONOMOUS})
    assert policy.mode_for("trusted") is Mode.AUTONOMOUS
    assert policy.mode_for("gpu") is Mode.MONITOR


@pytest.mark.parametrize(("service", "requested", "runs"), [
    (Mode.APPROVE, None, Mode.APPROVE),  # no request: the service's mode
    (Mode.MONITOR, Mode.AUTONOMOUS, Mode.MONITOR),  # looser asked: the service's
    (Mode.APPROVE, Mode.AUTONOMOUS, Mode.APPROVE),
    (Mode.MONITOR, Mode.APPROVE, Mode.MONITOR),
    (Mode.AUTONOMOUS, Mode.APPROVE, Mode.APPROVE),  # stricter asked: honoured
    (Mode.AUTONOMOUS, Mode.MONITOR, Mode.MONITOR),
    (Mode.APPROVE, Mode.MONITOR, Mode.MONITOR),
    (Mode.APPROVE, Mode.APPROVE, Mode.APPROVE),
])
def test_a_reporter_may_ask_for_a_stricter_mode_never_a_looser_one(service: Mode, requested: Mode | None,
                                                                  runs: Mode) -> None:
    assert governing_mode(service, requested) is runs
