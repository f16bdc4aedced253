"""A job owner's hostile checkpoint tree, on the real filesystem: discovery returns, with reasons.

Each case is an attack from the trust-boundary issue: a FIFO where a pointer file belongs (open()
blocks forever), rank and step numbers that made discovery build huge ranges, trackers that made
int() raise, JSON nested deep enough to raise RecursionError, and symlinks that lead out of the
root (to a secret the explanation must never show). Before the fix each of these hung, raised,
or leaked; the timeout marker turns a regression into a failure rather than a stuck suite.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints import (
    CheckpointConfig,
    LocalFileSystem,
    NotRegularFileError,
    OutsideRootError,
    ScanLimits,
    discover,
    find_resume_point,
)
from tests.fakes.checkpoint_bytes import dcp_metadata, file_bytes

pytestmark = pytest.mark.timeout(30)
LATER = datetime.now(UTC) + timedelta(hours=1)
SECRET = "TOPSECRET-root-only-content"


def touch(path: Path, data: bytes | None = None) -> None:
    """A file as its format starts and ends it (a torch zip, a safetensors header), else 16 bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(file_bytes(path.name) if data is None else data)


def deepspeed_step(root: Path, step: int) -> Path:
    tag = root / f"global_step{step}"
    touch(tag / "mp_rank_00_model_states.pt")
    touch(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    return tag


def megatron_iter(root: Path, step: int) -> Path:
    path = root / f"iter_{step:07d}"
    touch(path / "mp_rank_00" / "model_optim_rng.pt")
    return path


def hf_checkpoint(root: Path, step: int) -> Path:
    path = root / f"checkpoint-{step}"
    touch(path / "model.safetensors")
    touch(path / "trainer_state.json", json.dumps({"global_step": step}).encode())
    return path


def dcp_step(root: Path, step: int, ranks: int = 2) -> Path:
    path = root / f"step-{step}"
    touch(path / ".metadata", dcp_metadata({f"__{rank}_0.distcp": 16 for rank in range(ranks)}))
    for rank in range(ranks):
        touch(path / f"__{rank}_0.distcp")
    return path


def find(root: Path, layout: str | None = None, **config: object) -> tuple[str, list[str]]:
    found, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root), layout=layout, **config),
                                      LATER)
    problems = [p for c in found.checkpoints for p in c.problems] + list(found.problems)
    return choice.explanation, problems


# FIFOs: open() on a FIFO blocks until a writer appears -------------------------------------------


@pytest.mark.parametrize(("layout", "pointer", "build"), [
    ("deepspeed", "latest", lambda root: deepspeed_step(root, 5)),
    ("megatron", "latest_checkpointed_iteration.txt", lambda root: megatron_iter(root, 5)),
    ("hf", "checkpoint-5/trainer_state.json", lambda root: touch(root / "checkpoint-5" / "model.safetensors")),
])
def test_a_fifo_pointer_file_is_refused_not_opened(tmp_path: Path, layout: str, pointer: str,
                                                   build: object) -> None:
    assert callable(build)
    build(tmp_path)
    os.mkfifo(tmp_path / pointer)
    for configured in (layout, None):
        explanation, problems = find(tmp_path, configured)
        assert any("a FIFO, not a regular file" in p for p in problems), problems
        assert "FIFO" in explanation


def test_the_local_filesystem_never_opens_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "latest")
    fs = LocalFileSystem().within(str(tmp_path))
    with pytest.raises(NotRegularFileError, match="FIFO"):
        fs.read_small_text(str(tmp_path / "latest"))
    [entry] = fs.list_dir(str(tmp_path))
    assert entry.refused == "a FIFO, not a regular file" and not entry.is_dir


def test_a_fifo_as_the_root_is_not_a_directory(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "root")
    found = discover(LocalFileSystem(), CheckpointConfig(root=str(tmp_path / "root")))
    assert found.checkpoints == () and "not a directory" in found.problems[0]


# Absurd numbers in names: no range as large as the number --------------------------------------


def test_a_huge_megatron_rank_grid_is_one_problem(tmp_path: Path) -> None:
    megatron_iter(tmp_path, 5)
    touch(tmp_path / "iter_0000005" / "mp_rank_99999_99999" / "model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    _, problems = find(tmp_path, "megatron")
    [grid] = [p for p in problems if "model-parallel rank dir(s) missing" in p]
    assert "grid 100000 TP x 100000 PP" in grid and "mp_rank_00_001" in grid


def test_a_huge_dcp_shard_rank_is_one_problem(tmp_path: Path) -> None:
    path = dcp_step(tmp_path, 5, ranks=1)
    touch(path / "__99999999_0.distcp")
    _, problems = find(tmp_path, "dcp")
    assert any("shards of rank(s) 1, 2, 3" in p and "99999998 in all" in p for p in problems), problems


def test_a_rank_number_longer_than_a_step_is_refused(tmp_path: Path) -> None:
    path = dcp_step(tmp_path, 5)
    touch(path / f"__{'9' * 40}_0.distcp")
    _, problems = find(tmp_path, "dcp")
    assert any("rank number too long" in p for p in problems), problems


def test_a_huge_writer_thread_number_is_one_problem_not_a_hundred_million_files(tmp_path: Path) -> None:
    path = dcp_step(tmp_path, 5)
    touch(path / "__0_99999999.distcp")
    _, problems = find(tmp_path, "dcp")
    assert [p for p in problems if "writer-thread shard(s)" in p and "in all" in p], problems


def test_a_huge_deepspeed_data_parallel_rank_is_one_problem(tmp_path: Path) -> None:
    tag = deepspeed_step(tmp_path, 5)
    touch(tag / "zero_pp_rank_99999999_mp_rank_00_optim_states.pt")
    (tmp_path / "latest").write_text("global_step5")
    _, problems = find(tmp_path, "deepspeed")
    assert any("data-parallel rank(s) [1, 2, 3" in p and "99999998 in all" in p for p in problems), problems


def test_an_absurd_shard_count_in_an_hf_index_is_a_missing_shard(tmp_path: Path) -> None:
    path = hf_checkpoint(tmp_path, 5)
    (path / "model.safetensors").unlink()
    shard = "model-00001-of-99999999999.safetensors"
    touch(path / "model.safetensors.index.json", json.dumps({"weight_map": {"a": shard}}).encode())
    _, problems = find(tmp_path, "hf")
    assert problems == [f"shard {shard} listed in model.safetensors.index.json is missing"]


def test_a_step_of_more_than_18_digits_is_passed_over_with_a_note(tmp_path: Path) -> None:
    dcp_step(tmp_path, 5)
    (tmp_path / f"step-{'9' * 30}").mkdir()
    (tmp_path / f"iter_{'9' * 30}").mkdir()
    found, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(tmp_path), layout="dcp"), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 5
    assert [c.step for c in found.checkpoints] == [5]
    empty = tmp_path / "empty"
    (empty / f"step-{'9' * 30}").mkdir(parents=True)
    found = discover(LocalFileSystem(), CheckpointConfig(root=str(empty)))
    assert any("more than 18 digits" in p for p in found.problems), found.problems


# Trackers: digits that are not ASCII, and too many of them --------------------------------------


@pytest.mark.parametrize(("text", "reason"), [
    ("²", "neither an iteration number"),
    ("١٢٣", "neither an iteration number"),
    ("9" * 5000, "iteration number of 5000 digits"),
    ("12 34", "neither an iteration number"),
])
def test_a_tracker_that_is_no_iteration_number_is_a_problem(tmp_path: Path, text: str, reason: str) -> None:
    megatron_iter(tmp_path, 5)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(text)
    explanation, problems = find(tmp_path)
    assert any(reason in p for p in problems), problems
    assert explanation.startswith("no valid checkpoint")


def test_a_deepspeed_latest_with_a_path_or_control_characters_is_no_tag(tmp_path: Path) -> None:
    deepspeed_step(tmp_path, 5)
    for text in ("../../etc", "global_step5\x1b[2J", ".."):
        (tmp_path / "latest").write_text(text)
        _, problems = find(tmp_path, "deepspeed")
        assert any("not a tag name" in p for p in problems), problems
        assert not any("\x1b" in p for p in problems)


# JSON nested to blow the recursion limit --------------------------------------------------------


@pytest.mark.parametrize("name", ["trainer_state.json", "model.safetensors.index.json"])
def test_deeply_nested_json_is_refused_before_parsing(tmp_path: Path, name: str) -> None:
    path = hf_checkpoint(tmp_path, 5)
    (path / name).write_text("[" * 100_000)
    _, problems = find(tmp_path, "hf")
    assert any(f"{name} nests JSON deeper than 64 levels" in p for p in problems), problems


def test_json_integers_are_bounded(tmp_path: Path) -> None:
    path = hf_checkpoint(tmp_path, 5)
    (path / "trainer_state.json").write_text('{"global_step": ' + "9" * 5000 + "}")
    _, problems = find(tmp_path, "hf")
    assert any("trainer_state.json does not parse as JSON (an integer of 5000 digits)" in p for p in problems)


# Symlinks: followed inside the root, refused out of it, the target's content never shown -------


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(("layout", "pointer", "build"), [
    ("deepspeed", "latest", lambda root: deepspeed_step(root, 5)),
    ("megatron", "latest_checkpointed_iteration.txt", lambda root: megatron_iter(root, 5)),
    ("hf", "checkpoint-5/trainer_state.json", lambda root: hf_checkpoint(root, 5)),
])
def test_a_pointer_symlinked_out_of_the_root_is_not_followed(tmp_path: Path, secret: Path, layout: str,
                                                             pointer: str, build: object) -> None:
    root = tmp_path / "ckpt"
    assert callable(build)
    build(root)
    (root / pointer).unlink(missing_ok=True)
    (root / pointer).symlink_to(secret)
    explanation, problems = find(root, layout)
    assert any("leading out of the checkpoint root" in p for p in problems), problems
    assert SECRET not in explanation and SECRET not in " ".join(problems)
    (root / pointer).unlink()
    (root / pointer).symlink_to("/etc/shadow")
    explanation, _ = find(root, layout)
    assert "leading out of the checkpoint root" in explanation and "root:" not in explanation


def test_a_checkpoint_directory_symlinked_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    outside = deepspeed_step(tmp_path / "elsewhere", 9)
    deepspeed_step(root, 5)
    (root / "global_step9").symlink_to(outside, target_is_directory=True)
    (root / "latest").write_text("global_step9")
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root), layout="deepspeed"), LATER)
    assert choice.checkpoint is None or choice.checkpoint.step != 9
    assert "global_step9/: a symbolic link leading out of the checkpoint root" in choice.explanation
    fs = LocalFileSystem().within(str(root))
    with pytest.raises(OutsideRootError):
        fs.list_dir(str(root / "global_step9"))


def test_links_inside_the_root_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    dcp_step(root, 1)
    (root / "step-2").symlink_to("step-1", target_is_directory=True)  # relative
    (root / "step-3").symlink_to(root / "step-1", target_is_directory=True)  # absolute, inside
    step4 = root / "step-4"
    step4.mkdir()
    (step4 / ".metadata").symlink_to("../step-1/.metadata")
    (step4 / "__0_0.distcp").symlink_to(root / "step-1" / "__0_0.distcp")
    (step4 / "__1_0.distcp").symlink_to("../step-1/__1_0.distcp")
    found = discover(LocalFileSystem(), CheckpointConfig(root=str(root), layout="dcp"))
    assert [(c.step, c.complete) for c in found.checkpoints] == [(4, True), (3, True), (2, True), (1, True)]


def test_links_that_climb_out_loop_or_dangle_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    path = dcp_step(root, 1, ranks=4)
    (path / "__1_0.distcp").unlink()
    (path / "__1_0.distcp").symlink_to("../../secret")
    (path / "__2_0.distcp").unlink()
    (path / "__2_0.distcp").symlink_to("loop")
    (path / "loop").symlink_to("__2_0.distcp")
    (path / "__3_0.distcp").unlink()
    (path / "__3_0.distcp").symlink_to("nowhere")
    _, problems = find(root, "dcp")
    assert any("__1_0.distcp: a symbolic link climbs out of the checkpoint root" in p for p in problems), problems
    assert any("__2_0.distcp: more than 40 symbolic links" in p for p in problems), problems
    assert any("__3_0.distcp: a dangling symbolic link" in p for p in problems), problems


def test_a_root_that_is_itself_a_link_is_read_where_it_leads(tmp_path: Path) -> None:
    dcp_step(tmp_path / "real", 3)
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    explanation, problems = find(tmp_path / "alias", "dcp")
    assert problems == [] and explanation.startswith("resume from step 3")


# Bounds: entries per directory, in all, depth; undecodable names ---------------------------------


def test_a_directory_over_the_entry_limit_is_a_problem_of_its_checkpoint(tmp_path: Path) -> None:
    dcp_step(tmp_path, 1)
    crowded = dcp_step(tmp_path, 2)
    for index in range(20):
        touch(crowded / f"extra-{index}")
    limits = ScanLimits(max_entries_per_dir=10)
    _, choice = find_resume_point(LocalFileSystem(limits=limits), CheckpointConfig(root=str(tmp_path)), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 1
    assert "holds more than 10 entries; not judged" in choice.explanation


def test_the_per_root_budget_stops_discovery_with_a_reason(tmp_path: Path) -> None:
    for step in range(1, 6):
        dcp_step(tmp_path, step, ranks=8)
    found = discover(LocalFileSystem(limits=ScanLimits(max_entries_total=30)), CheckpointConfig(root=str(tmp_path)))
    assert found.checkpoints == ()
    assert any("looked at more than 30 entries under the root; stopped" in p for p in found.problems)


def test_paths_deeper_than_the_limit_are_refused(tmp_path: Path) -> None:
    fs = LocalFileSystem(limits=ScanLimits(max_depth=2)).within(str(tmp_path))
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    assert [e.name for e in fs.list_dir(str(tmp_path / "a" / "b"))] == ["c"]
    with pytest.raises(ValueError, match="more than 2 directory levels"):
        fs.list_dir(str(tmp_path / "a" / "b" / "c"))


def test_a_name_that_is_not_utf8_is_listed_refused_and_reported(tmp_path: Path) -> None:
    path = dcp_step(tmp_path, 1)
    os.mkdir(os.path.join(os.fsencode(tmp_path), b"step-2\xff"))
    os.close(os.open(os.path.join(os.fsencode(path), b"__1_0\xff.distcp"), os.O_CREAT | os.O_WRONLY, 0o644))
    found, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(tmp_path)), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 1
    type(found).model_validate_json(found.model_dump_json())  # no lone surrogate reaches a payload
    entries = LocalFileSystem().within(str(tmp_path)).list_dir(str(tmp_path))
    assert any(e.name == "step-2\\xff" and e.refused == "its name is not valid UTF-8" for e in entries)


def test_paths_outside_the_view_are_refused(tmp_path: Path) -> None:
    fs = LocalFileSystem().within(str(tmp_path / "ckpt"))
    for path in ("/etc/shadow", f"{tmp_path}/ckpt/../secret", f"{tmp_path}/ckptx"):
        with pytest.raises(OutsideRootError):
            fs.read_small_text(path)
    with pytest.raises(OutsideRootError):
        fs.within("/etc")
