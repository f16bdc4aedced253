"""The job's own step regex and glob, and the fake filesystem's refusals.

The generic layout runs patterns from the job's comment: on RE2 they cannot backtrack (`(a+)+$`
over a long name froze Python's `re`), a capture of nothing (`(x)?`) or of a non-ASCII digit
(`²`) is no step rather than a crash, and what RE2 cannot run is a comment error that says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from goodput.checkpoints import (
    CheckpointCommentError,
    CheckpointConfig,
    LocalFileSystem,
    OutsideRootError,
    config_from_comment,
    discover,
)
from tests.fakes.filesystem import FakeFileSystem, write_deepspeed

pytestmark = pytest.mark.timeout(30)


def touch(path: Path, data: bytes = b"x" * 16) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# The job's own step regex and glob run on RE2 ----------------------------------------------------


def generic_config(root: Path, step_regex: str, pattern: str = "*") -> CheckpointConfig:
    comment = (f"goodput:ckpt=generic:{root} goodput:ckpt-pattern={pattern} "
               f"goodput:ckpt-step-regex={step_regex} goodput:ckpt-marker=")
    config = config_from_comment(comment)
    assert config is not None
    return config


def test_a_backtracking_step_regex_runs_in_linear_time(tmp_path: Path) -> None:
    touch(tmp_path / ("a" * 200 + "!"))  # Python re: 2**200 ways to split the a's
    touch(tmp_path / "ckpt_aaa")
    found = discover(LocalFileSystem(), generic_config(tmp_path, "(a+)+$"))
    assert found.layout == "generic" and found.checkpoints == ()  # "aaa" is no step number


@pytest.mark.parametrize(("regex", "name"), [("(x)?", "ckpt_5"), ("(.+)", "ckpt_²"), ("_(.*)", "ckpt_" + "9" * 40)])
def test_a_step_regex_capturing_nothing_or_no_ascii_number_finds_no_step(tmp_path: Path, regex: str,
                                                                         name: str) -> None:
    touch(tmp_path / name)
    assert discover(LocalFileSystem(), generic_config(tmp_path, regex)).checkpoints == ()


def test_a_step_regex_without_groups_uses_the_whole_match(tmp_path: Path) -> None:
    touch(tmp_path / "ckpt_12")
    [checkpoint] = discover(LocalFileSystem(), generic_config(tmp_path, "[0-9]+")).checkpoints
    assert checkpoint.step == 12


@pytest.mark.parametrize("regex", [r"(a)\1", "(?=a)", "(?<=a)b", "(?!x)"])
def test_a_step_regex_re2_cannot_run_is_a_comment_error(regex: str) -> None:
    with pytest.raises(CheckpointCommentError, match="RE2"):
        config_from_comment(f"goodput:ckpt=generic:/ckpt goodput:ckpt-step-regex={regex}")


def test_a_regex_that_bypassed_the_comment_is_a_problem_of_the_root(tmp_path: Path) -> None:
    found = discover(LocalFileSystem(), CheckpointConfig(root=str(tmp_path), layout="generic", step_regex=r"(a)\1"))
    assert found.checkpoints == () and "does not compile with RE2" in found.problems[0]


@pytest.mark.parametrize(("glob", "names", "matched"), [
    ("ckpt_*", ["ckpt_1", "xckpt_2", "ckpt_3.tmp"], ["ckpt_1", "ckpt_3.tmp"]),
    ("model-?.pt", ["model-1.pt", "model-12.pt"], ["model-1.pt"]),
    ("m[0-9]_[!x]*", ["m1_a5", "m1_x5", "mx_a5"], ["m1_a5"]),
    ("a.b+(c)[*", ["a.b+(c)[7", "aXb+(c)[7"], ["a.b+(c)[7"]),
])
def test_globs_match_like_fnmatch(tmp_path: Path, glob: str, names: list[str], matched: list[str]) -> None:
    for name in names:
        touch(tmp_path / name)
    config = CheckpointConfig(root=str(tmp_path), layout="generic", pattern=glob, step_regex="([0-9]+)", marker=None)
    found = discover(LocalFileSystem(), config)
    assert sorted(c.tag for c in found.checkpoints) == matched


# The fake filesystem plays the same refusals -----------------------------------------------------


def test_the_fake_lists_special_files_as_refused_and_never_reads_them() -> None:
    fs = FakeFileSystem()
    write_deepspeed(fs, "/ckpt", 5)
    fs.add_special("/ckpt/latest")
    fs.add_special("/ckpt/global_step5/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", kind="a socket")
    (checkpoint,) = discover(fs, CheckpointConfig(root="/ckpt")).checkpoints
    assert "`latest` was not read: a FIFO, not a regular file" in checkpoint.problems
    assert "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: a socket, not a regular file" in checkpoint.problems
    assert fs.reads == []


def test_the_fake_confines_a_view_to_its_root() -> None:
    fs = FakeFileSystem()
    fs.add_file("/etc/shadow", text="root:x")
    view = fs.within("/ckpt")
    with pytest.raises(OutsideRootError):
        view.read_small_text("/etc/shadow")
    with pytest.raises(OutsideRootError):
        view.read_small_text("/ckpt/../etc/shadow")
