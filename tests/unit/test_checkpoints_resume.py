"""The resume choice, lost-work accounting and the job-comment syntax: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.checkpoints import (
    Checkpoint,
    CheckpointCommentError,
    CheckpointConfig,
    IncidentLoss,
    LostWork,
    choose_resume_point,
    config_from_comment,
    lost_work,
    summarize_lost_work,
    to_comment,
)
from goodput.checkpoints.scan import step_from_name, temp_reason

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def ckpt(step: int, age_s: float = 3600, problems: tuple[str, ...] = (), mtime: bool = True) -> Checkpoint:
    return Checkpoint(path=f"/ckpt/step-{step}", step=step, layout="dcp", files_checked=1, total_bytes=1,
                      mtime=NOW - timedelta(seconds=age_s) if mtime else None,
                      complete=not problems, problems=problems)


@pytest.mark.parametrize(("checkpoints", "chosen", "skipped"), [
    ([], None, []),
    ([ckpt(100), ckpt(300), ckpt(200)], 300, []),
    ([ckpt(100), ckpt(200, problems=("shard x is empty",))], 100, [200]),
    ([ckpt(100), ckpt(200, age_s=5), ckpt(300, problems=("partial",))], 100, [300, 200]),
    ([ckpt(100, problems=("a",)), ckpt(200, problems=("b",))], None, [200, 100]),
    ([ckpt(100), ckpt(200, mtime=False)], 100, [200]),
    ([ckpt(200), ckpt(200, problems=("leftover .tmp",))], 200, [200]),
])
def test_choice(checkpoints: list[Checkpoint], chosen: int | None, skipped: list[int]) -> None:
    choice = choose_resume_point(checkpoints, NOW, settle_s=120)
    assert (choice.checkpoint.step if choice.checkpoint else None) == chosen
    assert [s.checkpoint.step for s in choice.skipped] == skipped
    assert choice.explanation


def test_explanation_names_what_was_skipped_and_why() -> None:
    choice = choose_resume_point([ckpt(100), ckpt(200, problems=("shard __3_0.distcp is empty",))], NOW, 120)
    assert choice.explanation.startswith("resume from step 100 (/ckpt/step-100), layout dcp")
    assert "skipped step 200 (/ckpt/step-200): shard __3_0.distcp is empty" in choice.explanation
    none = choose_resume_point([ckpt(200, problems=("broken",))], NOW, 120)
    assert none.checkpoint is None and none.explanation.startswith("no valid checkpoint")
    assert choose_resume_point([], NOW, 120).explanation == "no checkpoint found"


def test_settle_boundary_and_recheck() -> None:
    assert choose_resume_point([ckpt(100, age_s=120)], NOW, 120).checkpoint is not None
    choice = choose_resume_point([ckpt(50), ckpt(100, age_s=119), ckpt(90, age_s=30)], NOW, 120)
    assert choice.checkpoint is not None and choice.checkpoint.step == 50
    assert choice.recheck_after_s == pytest.approx(1)
    assert choose_resume_point([ckpt(100)], NOW, 120).recheck_after_s is None
    # a clock-skewed future mtime is not trusted either
    assert choose_resume_point([ckpt(100, age_s=-60)], NOW, 120).checkpoint is None


def test_choice_round_trips_through_json() -> None:
    choice = choose_resume_point([ckpt(100), ckpt(200, problems=("x",))], NOW, 120)
    assert type(choice).model_validate_json(choice.model_dump_json()) == choice


@pytest.mark.parametrize(("args", "expected"), [
    ((1500, 1000, 2.0, 4, 8), LostWork(iterations=500, seconds=1000.0, gpu_hours=1000.0 * 32 / 3600)),
    ((1000, 1000, 2.0, 4, 8), LostWork()),
    ((900, 1000, 2.0, 4, 8), LostWork()),  # progress reported before the checkpoint: nothing lost
    ((300, None, 1.0, 1, 8), LostWork(iterations=300, seconds=300.0, gpu_hours=300 * 8 / 3600)),
])
def test_lost_work(args: tuple[int, int | None, float, int, int], expected: LostWork) -> None:
    got = lost_work(*args)
    assert got.iterations == expected.iterations
    assert got.seconds == pytest.approx(expected.seconds)
    assert got.gpu_hours == pytest.approx(expected.gpu_hours)


def test_lost_work_rejects_negative_inputs() -> None:
    with pytest.raises(ValueError, match="negative"):
        lost_work(10, 0, -1.0, 1, 1)


def test_lost_work_sums_per_job_and_cluster() -> None:
    a = lost_work(200, 100, 1.0, 2, 8)
    b = lost_work(50, 0, 2.0, 1, 4)
    summary = summarize_lost_work([
        IncidentLoss(cluster="eos", job_id="7", lost=a),
        IncidentLoss(cluster="eos", job_id="7", lost=a),
        IncidentLoss(cluster="eos", job_id="8", lost=b),
        IncidentLoss(cluster="selene", job_id="7", lost=b),
    ])
    assert summary.incidents == 4
    assert summary.by_job["eos"]["7"].iterations == 200
    assert summary.by_cluster["eos"].iterations == 250
    assert summary.by_cluster["selene"] == b
    assert summary.total.gpu_hours == pytest.approx(2 * a.gpu_hours + 2 * b.gpu_hours)
    assert summarize_lost_work([]).total == LostWork()


@pytest.mark.parametrize(("comment", "layout", "root"), [
    ("goodput:opt-in goodput:ckpt=megatron:/lustre/run7/ckpt", "megatron", "/lustre/run7/ckpt"),
    ("goodput:ckpt=auto:/scratch/x/", None, "/scratch/x"),
    ("goodput:ckpt=HuggingFace:/data/out", "hf", "/data/out"),
    ("goodput:ckpt=torchtitan:/dump goodput:ckpt-settle=30", "torchtitan", "/dump"),
])
def test_comment(comment: str, layout: str | None, root: str) -> None:
    config = config_from_comment(comment)
    assert config is not None and config.layout == layout and config.root == root


def test_comment_generic_options_round_trip() -> None:
    comment = ("goodput:ckpt=generic:/ckpt goodput:ckpt-pattern=model-*.pt goodput:ckpt-step-regex=-s(\\d+) "
               "goodput:ckpt-marker=")
    config = config_from_comment(comment)
    assert config == CheckpointConfig(layout="generic", root="/ckpt", pattern="model-*.pt", step_regex=r"-s(\d+)",
                                      marker=None)
    assert config_from_comment(to_comment(config)) == config
    assert config_from_comment("goodput:ckpt=torchtitan:/dump goodput:ckpt-settle=30") == CheckpointConfig(
        layout="torchtitan", root="/dump", settle_s=30)


@pytest.mark.parametrize("comment", [
    "goodput:ckpt=megatron:relative/path",
    "goodput:ckpt=/lustre/no-layout",
    "goodput:ckpt=tensorflow:/x",
    "goodput:ckpt=generic:/x goodput:ckpt-colour=red",
    "goodput:ckpt-pattern=ckpt_*",
    "goodput:ckpt=generic:/x goodput:ckpt-step-regex=(",
    "goodput:ckpt=dcp:/x goodput:ckpt-settle=soon",
    # hostile values: each is refused with a message, never crashes or reaches the filesystem
    "goodput:ckpt=dcp:/lustre/alice/../bob",
    "goodput:ckpt=dcp:/x,LD_PRELOAD=/evil.so",
    "goodput:ckpt=dcp:/x\x1b[2J",
    "goodput:ckpt=dcp:/x\x00y",
    "goodput:ckpt=dcp:/" + "a" * 5000,
    "goodput:ckpt=" + "z" * 10_000 + ":/x",
    "goodput:ckpt=dcp:/x goodput:ckpt-settle=inf",
    "goodput:ckpt=dcp:/x goodput:ckpt-settle=nan",
    "goodput:ckpt=dcp:/x goodput:ckpt-settle=1e999",
    "goodput:ckpt=dcp:/x goodput:ckpt-settle=" + "9" * 5000,
    "goodput:ckpt=generic:/x goodput:ckpt-marker=../../etc/shadow",
    "goodput:ckpt=generic:/x goodput:ckpt-marker=..",
    "goodput:ckpt=generic:/x goodput:ckpt-step-regex=(a)\\1",
    "goodput:ckpt=generic:/x goodput:ckpt-step-regex=" + "(" * 300,
    "goodput:ckpt=generic:/x goodput:ckpt-pattern=[z-a]",
])
def test_bad_comment_is_an_error(comment: str) -> None:
    with pytest.raises(CheckpointCommentError) as raised:
        config_from_comment(comment)
    message = str(raised.value)
    assert message and message.isprintable() and len(message) < 600


def test_no_token_means_no_config() -> None:
    assert config_from_comment("goodput:opt-in") is None
    assert config_from_comment("") is None
    assert config_from_comment("xgoodput:ckpt=dcp:/x") is None


@pytest.mark.parametrize(("name", "step", "temp"), [
    ("step-500", 500, False),
    ("global_step500", 500, False),
    ("checkpoint_500", 500, False),
    ("checkpoint-500", 500, False),
    ("iter_0000500", 500, False),
    ("epoch=3-step=500", 500, False),
    ("run7_ckpt12", 12, False),
    ("step-500.tmp", 500, True),
    ("tmp-checkpoint-500", 500, True),
    ("global_step500-partial", 500, True),
    ("notes", None, False),
])
def test_names(name: str, step: int | None, temp: bool) -> None:
    assert step_from_name(name) == step
    assert (temp_reason(name) is not None) == temp
