"""Checkpoint discovery per layout, table-driven over the in-memory filesystem.

Each case builds a tree, runs discovery (configured or auto-detected) and the resume choice, and
checks which step is chosen and which newer ones were skipped, for which reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from goodput.checkpoints import CheckpointConfig, choose_resume_point, discover, find_resume_point
from tests.fakes.filesystem import (
    DEFAULT_MTIME,
    FakeFileSystem,
    add_torch_file,
    write_dcp,
    write_deepspeed,
    write_generic,
    write_hf,
    write_lightning,
    write_megatron,
    write_megatron_dist,
)

NOW = datetime.fromtimestamp(DEFAULT_MTIME + 3600, UTC)
FRESH = DEFAULT_MTIME + 3600 - 10  # modified 10 s before NOW
ROOT = "/lustre/run"


@dataclass
class Case:
    build: Callable[[FakeFileSystem], None]
    layout: str
    chosen: int | None
    skipped: dict[int, str] = field(default_factory=dict)  # step → a substring of its reason
    configured: str | None = None  # None: auto-detect
    config: dict[str, object] = field(default_factory=dict)


def _megatron_valid(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500)
    write_megatron(fs, ROOT, 1000)


def _megatron_truncated(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500)
    write_megatron(fs, ROOT, 1000)
    fs.add_file(f"{ROOT}/iter_0001000/mp_rank_01/model_optim_rng.pt", size=0)


def _megatron_unfinished(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500)
    write_megatron(fs, ROOT, 1000, tracker=False)


def _megatron_missing_rank(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500, pp=2)
    write_megatron(fs, ROOT, 1000, pp=2)
    fs.remove(f"{ROOT}/iter_0001000/mp_rank_01_001")


def _megatron_tracker_to_missing(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500)
    fs.add_file(f"{ROOT}/latest_checkpointed_iteration.txt", text="1000")


def _megatron_dist_metadata_missing(fs: FakeFileSystem) -> None:
    write_megatron_dist(fs, ROOT, 500)
    write_megatron_dist(fs, ROOT, 1000)
    fs.remove(f"{ROOT}/iter_0001000/.metadata")


def _megatron_release(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 0, name="release")


def _megatron_garbage_tracker(fs: FakeFileSystem) -> None:
    write_megatron(fs, ROOT, 500)
    fs.add_file(f"{ROOT}/latest_checkpointed_iteration.txt", text="\x00\x01garbage")


def _dcp_tmp(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/step-500")
    write_dcp(fs, f"{ROOT}/step-1000.tmp")


def _dcp_empty_shard(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/global_step500")
    write_dcp(fs, f"{ROOT}/global_step1000")
    fs.add_file(f"{ROOT}/global_step1000/__3_0.distcp", size=0)


def _dcp_rank_gap(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/checkpoint_500")
    write_dcp(fs, f"{ROOT}/checkpoint_1000")
    fs.remove(f"{ROOT}/checkpoint_1000/__1_0.distcp")


def _dcp_missing_writer_thread(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/checkpoint_500", threads=2)
    write_dcp(fs, f"{ROOT}/checkpoint_1000", threads=2)
    fs.remove(f"{ROOT}/checkpoint_1000/__1_1.distcp")


def _megatron_dist_metadata_json_missing(fs: FakeFileSystem) -> None:
    write_megatron_dist(fs, ROOT, 500)
    write_megatron_dist(fs, ROOT, 1000)
    fs.remove(f"{ROOT}/iter_0001000/metadata.json")


def _dcp_unsettled(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/step-500")
    write_dcp(fs, f"{ROOT}/step-1000")
    fs.add_file(f"{ROOT}/step-1000/__2_0.distcp", size=64 * 1024 * 1024, mtime=FRESH)  # rewritten just now


def _deepspeed_ok(fs: FakeFileSystem) -> None:
    write_deepspeed(fs, ROOT, 500)
    write_deepspeed(fs, ROOT, 1000)


def _deepspeed_latest_missing_dir(fs: FakeFileSystem) -> None:
    write_deepspeed(fs, ROOT, 500)
    fs.add_file(f"{ROOT}/latest", text="global_step1000")


def _deepspeed_unfinished(fs: FakeFileSystem) -> None:
    write_deepspeed(fs, ROOT, 500)
    write_deepspeed(fs, ROOT, 1000, latest=False)


def _deepspeed_missing_optim(fs: FakeFileSystem) -> None:
    write_deepspeed(fs, ROOT, 500, dp=4)
    write_deepspeed(fs, ROOT, 1000, dp=4)
    fs.remove(f"{ROOT}/global_step1000/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt")


def _hf_valid_sharded(fs: FakeFileSystem) -> None:
    write_hf(fs, ROOT, 9, shards=2)
    write_hf(fs, ROOT, 500, shards=2)


def _hf_sharded_missing(fs: FakeFileSystem) -> None:
    write_hf(fs, ROOT, 500, shards=3)
    write_hf(fs, ROOT, 1000, shards=3)
    fs.remove(f"{ROOT}/checkpoint-1000/model-00002-of-00003.safetensors")


def _hf_state_garbage(fs: FakeFileSystem) -> None:
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    fs.add_file(f"{ROOT}/checkpoint-1000/trainer_state.json", text='{"global_step": 10')


def _hf_tmp_and_truncated(fs: FakeFileSystem) -> None:
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    write_hf(fs, ROOT, 1500, name="tmp-checkpoint-1500")
    fs.add_file(f"{ROOT}/checkpoint-1000/model.safetensors", size=0)


def _hf_step_mismatch(fs: FakeFileSystem) -> None:
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    fs.add_file(f"{ROOT}/checkpoint-1000/trainer_state.json", text='{"global_step": 999}')


def _torchtitan(fs: FakeFileSystem) -> None:
    write_dcp(fs, f"{ROOT}/checkpoint/step-500")
    write_dcp(fs, f"{ROOT}/checkpoint/step-1000")
    fs.add_file(f"{ROOT}/checkpoint/step-1000/.metadata", size=0)


def _nemo(fs: FakeFileSystem) -> None:
    for step in (500, 1000):
        name = f"megatron_gpt--val_loss=2.10-step={step}-consumed_samples={step * 8}.0"
        write_dcp(fs, f"{ROOT}/{name}/weights")
        fs.add_dir(f"{ROOT}/{name}/context")
    fs.add_file(f"{ROOT}/megatron_gpt--val_loss=2.10-step=1000-consumed_samples=8000.0-unfinished", text="")


def _lightning_last_is_newest(fs: FakeFileSystem) -> None:
    write_lightning(fs, ROOT, steps=(200, 400), last=1000)  # top-k by metric kept older steps


def _lightning_truncated_last(fs: FakeFileSystem) -> None:
    write_lightning(fs, ROOT, steps=(200, 400), last=1000)
    fs.truncate(f"{ROOT}/last.ckpt", 4 * 1024 * 1024)


def _lightning_truncated_named(fs: FakeFileSystem) -> None:
    write_lightning(fs, ROOT, steps=(200, 400), last=None)
    fs.truncate(f"{ROOT}/epoch=4-step=400.ckpt", 1024)


def _nemo1_ckpt_files(fs: FakeFileSystem) -> None:
    for step in (500, 1000):
        add_torch_file(fs, f"{ROOT}/megatron_gpt--val_loss=2.10-step={step}-consumed_samples={step * 8}.0.ckpt",
                       8 * 1024 * 1024, fields={"global_step": step})
    fs.truncate(f"{ROOT}/megatron_gpt--val_loss=2.10-step=1000-consumed_samples=8000.0.ckpt", 100)


def _generic_marker(fs: FakeFileSystem) -> None:
    write_generic(fs, ROOT, "ckpt_500")
    write_generic(fs, ROOT, "ckpt_1000", marker=None)
    fs.add_file(f"{ROOT}/other_2000/model.bin", size=1)


def _generic_files(fs: FakeFileSystem) -> None:
    fs.add_file(f"{ROOT}/model-e3-s500.pt", size=10)
    fs.add_file(f"{ROOT}/model-e3-s500.pt.done", text="")
    fs.add_file(f"{ROOT}/model-e4-s900.pt", size=10)


CASES: dict[str, Case] = {
    "megatron-valid": Case(_megatron_valid, "megatron", 1000),
    "megatron-truncated-newest-shard": Case(_megatron_truncated, "megatron", 500, {1000: "empty (0 bytes)"}),
    "megatron-newer-than-tracker": Case(_megatron_unfinished, "megatron", 500, {1000: "newer than"}),
    "megatron-missing-pp-rank": Case(_megatron_missing_rank, "megatron", 500, {1000: "mp_rank_01_001"}),
    "megatron-tracker-names-missing-dir": Case(_megatron_tracker_to_missing, "megatron", 500,
                                               {1000: "does not exist"}),
    "megatron-dist-no-metadata": Case(_megatron_dist_metadata_missing, "megatron", 500, {1000: ".metadata"}),
    "megatron-release": Case(_megatron_release, "megatron", 0),
    "megatron-garbage-tracker": Case(_megatron_garbage_tracker, "megatron", None,
                                     {500: "neither an iteration number"}),
    "dcp-partial-tmp-dir": Case(_dcp_tmp, "dcp", 500, {1000: "'.tmp'"}),
    "dcp-truncated-shard": Case(_dcp_empty_shard, "dcp", 500, {1000: "__3_0.distcp is empty"}),
    "dcp-rank-gap": Case(_dcp_rank_gap, "dcp", 500, {1000: "rank(s) 1 are missing"}),
    "dcp-unsettled-mtime": Case(_dcp_unsettled, "dcp", 500, {1000: "settle time"}),
    "dcp-missing-writer-thread-file": Case(_dcp_missing_writer_thread, "dcp", 500, {1000: "__1_1.distcp"}),
    "megatron-dist-no-metadata-json": Case(_megatron_dist_metadata_json_missing, "megatron", 500,
                                           {1000: "metadata.json is missing"}),
    "deepspeed-valid": Case(_deepspeed_ok, "deepspeed", 1000),
    "deepspeed-latest-names-missing-dir": Case(_deepspeed_latest_missing_dir, "deepspeed", 500,
                                               {1000: "does not exist"}),
    "deepspeed-newer-than-latest": Case(_deepspeed_unfinished, "deepspeed", 500, {1000: "newer than `latest`"}),
    "deepspeed-missing-optimizer-shard": Case(_deepspeed_missing_optim, "deepspeed", 500, {1000: "[2]"}),
    "hf-valid-sharded": Case(_hf_valid_sharded, "hf", 500),
    "hf-missing-listed-shard": Case(_hf_sharded_missing, "hf", 500, {1000: "model-00002-of-00003.safetensors"}),
    "hf-trainer-state-garbage": Case(_hf_state_garbage, "hf", 500, {1000: "does not parse as JSON"}),
    "hf-tmp-and-truncated": Case(_hf_tmp_and_truncated, "hf", 500, {1500: "'tmp-'", 1000: "model.safetensors"}),
    "hf-step-mismatch": Case(_hf_step_mismatch, "hf", 500, {1000: "global_step 999"}),
    "torchtitan-empty-metadata": Case(_torchtitan, "torchtitan", 500, {1000: ".metadata is empty"}),
    "nemo-unfinished-marker": Case(_nemo, "nemo", 500, {1000: "-unfinished exists"}),
    "lightning-last-is-newest": Case(_lightning_last_is_newest, "lightning", 1000),
    "lightning-truncated-last": Case(_lightning_truncated_last, "lightning", 400),
    "lightning-truncated-named": Case(_lightning_truncated_named, "lightning", 200,
                                      {400: "no zip end-of-central-directory record"}),
    "nemo1-ckpt-files-are-lightning": Case(_nemo1_ckpt_files, "lightning", 500, {1000: "truncated"}),
    "generic-marker": Case(_generic_marker, "generic", 500, {1000: ".complete is missing"}, configured="generic"),
    "generic-file-checkpoints": Case(_generic_files, "generic", 500, {900: ".done is missing"}, configured="generic",
                                     config={"pattern": "model-*.pt", "step_regex": r"-s(\d+)", "marker": ".done"}),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("detect", ["auto", "configured"])
def test_layout_case(name: str, detect: str) -> None:
    case = CASES[name]
    fs = FakeFileSystem()
    case.build(fs)
    layout = case.configured or (None if detect == "auto" else case.layout)
    config = CheckpointConfig(layout=layout, root=ROOT, **case.config)
    found, choice = find_resume_point(fs, config, NOW)

    assert found.layout == case.layout, found
    assert all(c.layout == case.layout for c in found.checkpoints)
    assert (choice.checkpoint.step if choice.checkpoint else None) == case.chosen, choice.explanation
    if choice.checkpoint is not None:
        assert choice.checkpoint.complete and not choice.checkpoint.problems
        assert choice.checkpoint.files_checked > 0
    skipped = {s.checkpoint.step: s.reason for s in choice.skipped}
    assert set(skipped) == set(case.skipped), choice.explanation
    for step, fragment in case.skipped.items():
        assert fragment in skipped[step], skipped[step]
        assert f"step {step}" in choice.explanation


def test_valid_megatron_reports_sizes_and_pointer() -> None:
    fs = FakeFileSystem()
    write_megatron(fs, ROOT, 500, tp=4)
    (checkpoint,) = discover(fs, CheckpointConfig(root=ROOT)).checkpoints
    assert checkpoint.pointer and checkpoint.tag == "iter_0000500"
    assert checkpoint.files_checked == 4
    assert checkpoint.total_bytes == 4 * 128 * 1024 * 1024
    assert checkpoint.mtime == datetime.fromtimestamp(DEFAULT_MTIME, UTC)


def test_release_is_step_zero_with_its_tag() -> None:
    fs = FakeFileSystem()
    _megatron_release(fs)
    choice = choose_resume_point(discover(fs, CheckpointConfig(root=ROOT)).checkpoints, NOW, 120)
    assert choice.checkpoint is not None and choice.checkpoint.tag == "release" and choice.checkpoint.pointer


def test_unsettled_newest_says_when_to_look_again() -> None:
    fs = FakeFileSystem()
    _dcp_unsettled(fs)
    _, choice = find_resume_point(fs, CheckpointConfig(root=ROOT, settle_s=120), NOW)
    assert choice.recheck_after_s == pytest.approx(110)


def test_max_candidates_bounds_the_work() -> None:
    fs = FakeFileSystem()
    for step in range(100, 3100, 100):
        write_hf(fs, ROOT, step)
    found = discover(fs, CheckpointConfig(root=ROOT, max_candidates=3))
    assert [c.step for c in found.checkpoints] == [3000, 2900, 2800]
    assert len(fs.reads) == 3


def test_unknown_root_and_unrecognised_layout_are_problems_not_crashes() -> None:
    fs = FakeFileSystem()
    missing = discover(fs, CheckpointConfig(root="/nope"))
    assert missing.checkpoints == () and "not a directory" in missing.problems[0]
    fs.add_file(f"{ROOT}/notes.txt", text="hello")
    found, choice = find_resume_point(fs, CheckpointConfig(root=ROOT), NOW)
    assert found.layout is None and choice.checkpoint is None
    assert "no checkpoint layout recognised" in choice.explanation
    bad = discover(fs, CheckpointConfig(root=ROOT, layout="tensorflow"))
    assert "unknown checkpoint layout" in bad.problems[0]


def test_configured_layout_that_finds_nothing_does_not_fall_back() -> None:
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 500)
    found = discover(fs, CheckpointConfig(root=ROOT, layout="deepspeed"))
    assert found.layout == "deepspeed" and found.checkpoints == ()


def test_deepspeed_without_zero_needs_no_optimizer_shards() -> None:
    fs = FakeFileSystem()
    write_deepspeed(fs, ROOT, 500, dp=0)
    (checkpoint,) = discover(fs, CheckpointConfig(root=ROOT)).checkpoints
    assert checkpoint.complete, checkpoint.problems


def test_every_file_counts_towards_size_and_settling() -> None:
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    fs.add_file(f"{ROOT}/checkpoint-1000/rng_state_7.pth", size=100, mtime=FRESH)
    found, choice = find_resume_point(fs, CheckpointConfig(root=ROOT), NOW)
    newest = found.checkpoints[0]
    assert newest.step == 1000 and newest.files_checked == 4
    assert newest.total_bytes == 512 * 1024 * 1024 + 1024 * 1024 + 100 + len('{"global_step": 1000, "log_history": []}')
    assert choice.checkpoint is not None and choice.checkpoint.step == 500


def test_generic_walks_nested_files() -> None:
    fs = FakeFileSystem()
    write_generic(fs, ROOT, "ckpt_1")
    fs.add_file(f"{ROOT}/ckpt_1/opt/deeper/empty.bin", size=0)
    (checkpoint,) = discover(fs, CheckpointConfig(root=ROOT, layout="generic")).checkpoints
    assert checkpoint.problems == ("opt/deeper/empty.bin is empty (0 bytes): truncated or never written",)
