"""Checkpoint-interval advice from measured save cost and failure rate (Young-Daly)."""

from __future__ import annotations

import io
import json
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints.advice import (
    AdviceError,
    advise,
    daly_interval_s,
    node_failure_rate_per_hour,
    save_cost_s,
    waste_fraction,
)
from goodput.checkpoints.model import Checkpoint
from goodput.cli.advise import run_advise
from goodput.service.incidents import IncidentSummary

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def saves(every_steps: int, step_time_s: float, cost_s: float, n: int = 5) -> list[Checkpoint]:
    """Checkpoints as a job writes them: `every_steps` apart, each save taking `cost_s` more."""
    out = []
    for i in range(1, n + 1):
        wall = i * (every_steps * step_time_s + cost_s)
        out.append(Checkpoint(path=f"/ckpt/step-{i * every_steps}", step=i * every_steps, layout="generic",
                              complete=True, mtime=T0 + timedelta(seconds=wall)))
    return out


def test_the_save_cost_is_the_time_beyond_the_steps_between_checkpoints() -> None:
    assert save_cost_s(saves(100, 2.0, 45.0), 2.0) == pytest.approx(45.0)
    slow_one = saves(100, 2.0, 45.0)
    slow_one[-1] = slow_one[-1].model_copy(update={"mtime": slow_one[-1].mtime + timedelta(seconds=600)})
    assert save_cost_s(slow_one, 2.0) == pytest.approx(45.0)  # the median, not one slow save
    with pytest.raises(AdviceError, match="two checkpoints"):
        save_cost_s(saves(100, 2.0, 45.0, n=1), 2.0)
    with pytest.raises(AdviceError, match="nothing measurable"):  # asynchronous saves: nothing to balance
        advise(saves(100, 2.0, 0.0), step_time_s=2.0, mtbf_hours=24, gpus=8)


def test_daly_is_youngs_sqrt_2cm_when_saves_are_cheap_and_the_mtbf_when_they_are_not() -> None:
    cost, mtbf = 60.0, 24 * 3600.0
    assert daly_interval_s(cost, mtbf) == pytest.approx(math.sqrt(2 * cost * mtbf), rel=0.02)
    assert daly_interval_s(3 * mtbf, mtbf) == mtbf
    best = daly_interval_s(cost, mtbf)
    for other in (best / 3, best * 3):  # the optimum wastes less than an interval far from it
        assert waste_fraction(best, cost, mtbf) < waste_fraction(other, cost, mtbf)


def test_advice_for_a_job_that_checkpoints_far_too_rarely() -> None:
    every_4h = saves(7200, 2.0, 60.0)  # every 7,200 steps of 2 s: every 4 hours
    advice = advise(every_4h, step_time_s=2.0, mtbf_hours=12.0, gpus=512)
    assert advice.current_interval_s == pytest.approx(4 * 3600)
    assert advice.advised_interval_s == pytest.approx(math.sqrt(2 * 60 * 12 * 3600), rel=0.05)  # about 38 min
    assert advice.advised_steps == round(advice.advised_interval_s / 2.0)
    assert advice.waste_advised < advice.waste_now
    assert advice.gpu_hours_saved_per_day == pytest.approx((advice.waste_now - advice.waste_advised) * 512 * 24)


def test_the_failure_rate_counts_node_faults_once_each_per_node_hour() -> None:
    def incident(node: str, hours: float, job: str, category: str = "gpu-hardware") -> IncidentSummary:
        return IncidentSummary(incident_id=f"{node}-{job}", job_id=job, cluster="c", category=category,
                               culprit_nodes=(node,), started_at=T0 - timedelta(hours=hours))
    rows = [incident("n1", 10, "1"), incident("n1", 10, "2"),  # one fault that hit two jobs
            incident("n2", 30, "3"), incident("n3", 5, "4", "app-error"), incident("n4", 24 * 40, "5")]
    rate = node_failure_rate_per_hour(rows, cluster_nodes=100, now=T0, window=timedelta(days=30))
    assert rate == pytest.approx(2 / (100 * 30 * 24))


def test_goodput_advise_reads_a_real_checkpoint_tree(tmp_path: Path) -> None:
    """On a tree in the generic layout (`ckpt_<step>/` with a `.complete` marker) whose file times
    say each save took 30 s beyond its 100 steps of 2 s."""
    for i, step in enumerate((100, 200, 300)):
        d = tmp_path / f"ckpt_{step}"
        d.mkdir()
        (d / "model.bin").write_bytes(b"x" * 64)
        (d / ".complete").write_text("done")
        stamp = T0.timestamp() + i * (100 * 2.0 + 30)
        for path in (d / "model.bin", d / ".complete", d):
            os.utime(path, (stamp, stamp))
    out, err = io.StringIO(), io.StringIO()
    code = run_advise(str(tmp_path), "generic", step_time_s=2.0, mtbf_hours=24, gpus=64, restart_s=600,
                      as_json=True, out=out, err=err, now=T0 + timedelta(days=1))
    assert code == 0, err.getvalue()
    advice = json.loads(out.getvalue())
    assert advice["save_cost_s"] == pytest.approx(30.0, abs=1.0) and advice["current_interval_s"] == 200.0
    assert advice["advised_interval_s"] > advice["current_interval_s"]  # this job saves too often
    assert run_advise("relative", None, step_time_s=2.0, mtbf_hours=24, gpus=8, restart_s=0, as_json=False,
                      out=out, err=err, now=T0) == 2
