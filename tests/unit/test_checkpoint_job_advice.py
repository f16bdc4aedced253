"""One job's checkpoint interval advice from what goodput measured: where each number comes from,
what is said when one is missing, and the gathering over a fake scheduler and a real tree."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints import InProcessFinder
from goodput.checkpoints.finder import find_for_job
from goodput.checkpoints.job_advice import (
    FailureRate,
    Measured,
    Overrides,
    assemble,
    failure_rate,
    gpus_in_gres,
    job_gpus,
    render,
    step_time,
)
from goodput.checkpoints.model import Checkpoint
from goodput.demo.scheduler import FakeScheduler
from goodput.scheduler import JobInfo, JobState, NodeInfo
from goodput.service.incidents import IncidentSummary
from workers.job_advice import gather

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def generic_tree(root: Path, cost_s: float = 30.0, step_time_s: float = 2.0, every: int = 100) -> Path:
    """`ckpt_<step>/` with a `.complete` marker, whose file times say each save took `cost_s`
    beyond its `every` steps of `step_time_s`."""
    root.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate((every, 2 * every, 3 * every)):
        d = root / f"ckpt_{step}"
        d.mkdir()
        (d / "model.bin").write_bytes(b"x" * 64)
        (d / ".complete").write_text("done")
        stamp = T0.timestamp() + i * (every * step_time_s + cost_s)
        for path in (d / "model.bin", d / ".complete", d):
            os.utime(path, (stamp, stamp))
    return root


def job(comment: str = "goodput:opt-in", nodes: tuple[str, ...] = ("n1", "n2")) -> JobInfo:
    return JobInfo(job_id="77", state=JobState.RUNNING, nodes=nodes, comment=comment, user="alice",
                   user_id=os.getuid(), group_id=os.getgid())


def saves(n: int = 3) -> list[Checkpoint]:
    return [Checkpoint(path=f"/c/ckpt_{i * 100}", step=i * 100, layout="generic", complete=True,
                       mtime=T0 + timedelta(seconds=i * 230)) for i in range(1, n + 1)]


def fault(node: str, hours_ago: float, job_id: str = "1", category: str = "gpu-hardware") -> IncidentSummary:
    return IncidentSummary(incident_id=f"{node}-{job_id}-{hours_ago}", job_id=job_id, cluster="c",
                           category=category, culprit_nodes=(node,), started_at=T0 - timedelta(hours=hours_ago))


def test_gpus_come_from_the_nodes_gres_else_from_the_policy() -> None:
    assert gpus_in_gres("gpu:8") == 8
    assert gpus_in_gres("gpu:h100:4(S:0-1),gpu:a100:2,nic:1") == 6
    assert gpus_in_gres("(null)") is None and gpus_in_gres("") is None and gpus_in_gres("gpu:lots") is None
    nodes = [NodeInfo(name="n1", state="ALLOC", gres="gpu:4"), NodeInfo(name="n2", state="ALLOC", gres="gpu:4")]
    assert job_gpus(job(), nodes, 8) == Measured(value=8.0, source="gres of its 2 node(s)")
    assert job_gpus(job(), nodes[:1], 8) == Measured(value=16.0, source="policy.gpus_per_node (8) x 2 node(s)")
    assert job_gpus(job(nodes=()), nodes, 8) is None


def test_the_step_time_is_the_watchers_median_else_what_an_incident_recorded() -> None:
    watched = step_time((2.0, 2.2, 9.0), (5.0,), attempt=1)
    assert watched is not None and watched.value == 2.2
    assert "its watcher measured (attempt 1)" in watched.source
    reported = step_time((), (3.0, 4.0), attempt=0)
    assert reported is not None and reported.value == 4.0 and "incident" in reported.source
    assert step_time((), (), attempt=0) is None


def test_node_faults_are_counted_once_per_node_and_the_window_is_cut_to_what_was_listed() -> None:
    rows = [fault("n1", 10, "1"), fault("n1", 10, "2"), fault("n2", 30), fault("n3", 5, category="app-error"),
            fault("n4", 24 * 40)]
    rate = failure_rate(rows, cluster_nodes=100, now=T0, window=timedelta(days=30), limit_reached=False)
    assert (rate.node_faults, rate.window_hours, rate.shortened) == (2, 720.0, False)
    assert rate.per_node_hour == pytest.approx(2 / (100 * 720))
    assert "2 node fault(s) in 30.0 days on 100 nodes, from 5 incident(s)" in rate.basis()
    # The listing stopped at its limit 30 h back: the 29 days before were not seen, not quiet.
    cut = failure_rate(rows[:3], cluster_nodes=100, now=T0, window=timedelta(days=30), limit_reached=True)
    assert cut.shortened and cut.window_hours == pytest.approx(30.0) and "cut" in cut.basis()


def test_measured_numbers_give_the_advice_and_say_what_they_stand_on() -> None:
    rate = FailureRate(node_faults=4, cluster_nodes=100, window_hours=720.0, incidents=9)
    advice = assemble(job(), "c", checkpoints=saves(), checkpoint_note="read in-process",
                      gpus=Measured(value=16, source="gres"), step=Measured(value=2.0, source="watcher"),
                      failures=rate, failures_note="", overrides=Overrides())
    assert advice.advice is not None and not advice.missing
    assert advice.mtbf_hours is not None and advice.mtbf_hours.value == pytest.approx(720 * 100 / 4 / 2)
    assert "x 2 node(s) of the job" in advice.mtbf_hours.source
    assert advice.advice.save_cost_s == pytest.approx(30.0) and advice.advice.gpus == 16
    text = render(advice)
    assert "job 77 on c: RUNNING, 2 node(s), owner alice" in text and "advised (Young-Daly)" in text


def test_what_could_not_be_measured_is_named_with_the_flag_that_supplies_it() -> None:
    quiet = FailureRate(node_faults=0, cluster_nodes=100, window_hours=720.0, incidents=3)
    advice = assemble(job(nodes=()), "c", checkpoints=saves(1), checkpoint_note="the job names no checkpoints",
                      gpus=None, step=None, failures=quiet, failures_note="", overrides=Overrides())
    assert advice.advice is None
    missing = "\n".join(advice.missing)
    for flag in ("--step-time", "--gpus", "--mtbf-hours", "goodput advise ROOT"):
        assert flag in missing
    assert "found 1 (the job names no checkpoints)" in missing
    assert "not measured: step time" in render(advice)
    no_faults = assemble(job(), "c", checkpoints=saves(), checkpoint_note="", gpus=None, step=None,
                         failures=quiet, failures_note="", overrides=Overrides(step_time_s=2.0, gpus=8))
    assert no_faults.missing == ("failure rate: no node fault in the window (0 node fault(s) in 30.0 days on 100 "
                                 "nodes, from 3 incident(s)); give --mtbf-hours H or a longer --window",)
    given = assemble(job(), "c", checkpoints=saves(), checkpoint_note="", gpus=None, step=None, failures=None,
                     failures_note="unlisted", overrides=Overrides(step_time_s=2.0, gpus=8, mtbf_hours=12))
    assert given.advice is not None and given.mtbf_hours == Measured(value=12, source="given with --mtbf-hours")
    free = assemble(job(), "c", checkpoints=saves(), checkpoint_note="", gpus=None, step=None, failures=None,
                    failures_note="", overrides=Overrides(step_time_s=2.3, gpus=8, mtbf_hours=12))
    assert free.advice is None and "cost nothing measurable" in free.error


async def test_the_job_comment_names_the_tree_the_same_way_the_recovery_reads_it(tmp_path: Path) -> None:
    finder = InProcessFinder()
    none, why = await find_for_job(finder, job(), T0)
    assert none is None and "names no checkpoints" in why
    bad, why = await find_for_job(finder, job("goodput:ckpt=generic:relative"), T0)
    assert bad is None and "invalid" in why
    tree = generic_tree(tmp_path / "ckpt")
    found, why = await find_for_job(finder, job(f"goodput:ckpt=generic:{tree}"), T0 + timedelta(days=1))
    assert found is not None and found.discovery is not None and len(found.discovery.checkpoints) == 3
    assert "resume from step 300" in why


async def test_gathering_from_a_fake_scheduler_a_real_tree_and_the_incidents(tmp_path: Path) -> None:
    tree = generic_tree(tmp_path / "ckpt")
    fake = FakeScheduler()  # the demo cluster: 8 nodes of gpu:8
    fake.add_job(job(f"goodput:opt-in goodput:ckpt=generic:{tree}", nodes=("node7", "node8")))
    incidents = [fault("node2", 10), fault("node3", 100), fault("node4", 200)]
    advice = await gather(await fake.get_job("77"), "c", scheduler=fake, finder=InProcessFinder(), client=None,
                          incidents=incidents, limit_reached=False, reported_step_times=(2.0,), gpus_per_node=4,
                          overrides=Overrides(), now=T0 + timedelta(days=1))
    assert advice.advice is not None, advice.missing
    assert advice.gpus == Measured(value=16.0, source="gres of its 2 node(s)")
    assert advice.failures is not None and (advice.failures.node_faults, advice.failures.cluster_nodes) == (3, 8)
    assert advice.checkpoint_count == 3 and advice.advice.save_cost_s == pytest.approx(30.0, abs=1.0)
    unlisted = await gather(await fake.get_job("77"), "c", scheduler=None, finder=InProcessFinder(), client=None,
                            incidents=None, limit_reached=False, gpus_per_node=4, overrides=Overrides(),
                            now=T0 + timedelta(days=1))
    assert unlisted.advice is None and unlisted.gpus is not None and unlisted.gpus.source.startswith("policy")
    assert any("--cluster-nodes" in m for m in unlisted.missing) and any("--step-time" in m for m in unlisted.missing)
