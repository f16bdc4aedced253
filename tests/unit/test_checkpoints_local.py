"""Checkpoint discovery on real directories through LocalFileSystem."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints import CheckpointConfig, LocalFileSystem, TooLargeError, discover, find_resume_point
from tests.fakes.checkpoint_bytes import dcp_metadata, file_bytes

LATER = datetime.now(UTC) + timedelta(hours=1)


def touch(path: Path, data: bytes | None = None) -> None:
    """A file as its format starts and ends it (a torch zip, a safetensors header), else 16 bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(file_bytes(path.name) if data is None else data)


def test_megatron_on_disk_skips_truncated_newest(tmp_path: Path) -> None:
    for step in (100, 200):
        for rank in range(2):
            touch(tmp_path / f"iter_{step:07d}" / f"mp_rank_{rank:02d}" / "model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200\n")
    touch(tmp_path / "iter_0000200" / "mp_rank_01" / "model_optim_rng.pt", b"")
    found, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(tmp_path)), LATER)
    assert found.layout == "megatron"
    assert choice.checkpoint is not None and choice.checkpoint.step == 100
    assert choice.checkpoint.path == str(tmp_path / "iter_0000100")
    assert choice.checkpoint.total_bytes == 2 * 512
    assert "mp_rank_01/model_optim_rng.pt is empty" in choice.skipped[0].reason


def test_hf_on_disk_with_sharded_index(tmp_path: Path) -> None:
    for step in (10, 20):
        ckpt = tmp_path / f"checkpoint-{step}"
        shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
        touch(ckpt / "model.safetensors.index.json",
              json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}}).encode())
        touch(ckpt / "trainer_state.json", json.dumps({"global_step": step}).encode())
        for shard in shards:
            touch(ckpt / shard)
    (tmp_path / "checkpoint-20" / "model-00002-of-00002.safetensors").unlink()
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(tmp_path)), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 10
    assert "model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing" \
        in choice.skipped[0].reason


def test_dcp_on_disk_unsettled_by_real_mtime(tmp_path: Path) -> None:
    for step in (1, 2):
        touch(tmp_path / f"step-{step}" / ".metadata", dcp_metadata({"__0_0.distcp": 16}))
        touch(tmp_path / f"step-{step}" / "__0_0.distcp")
    old = datetime.now(UTC).timestamp() - 3600
    for path in (tmp_path / "step-1").iterdir():
        os.utime(path, (old, old))
    os.utime(tmp_path / "step-1", (old, old))
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(tmp_path), settle_s=600),
                                  datetime.now(UTC))
    assert choice.checkpoint is not None and choice.checkpoint.step == 1
    assert "settle time" in choice.skipped[0].reason


def test_local_filesystem_seam(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    touch(tmp_path / "small.txt", b"hello")
    touch(tmp_path / "big.json", b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert [(e.name, e.is_dir, e.size, e.refused) for e in fs.list_dir(str(tmp_path))] == [
        ("big.json", False, 100, ""), ("dangling", False, 0, "a dangling symbolic link"),
        ("small.txt", False, 5, ""), ("sub", True, e_size(tmp_path / "sub"), "")]
    assert fs.list_dir(str(tmp_path / "missing")) == []
    assert fs.list_dir(str(tmp_path / "small.txt")) == []
    assert fs.stat(str(tmp_path / "missing")) is None
    entry = fs.stat(str(tmp_path / "small.txt"))
    assert entry is not None and entry.name == "small.txt" and entry.size == 5
    assert fs.read_small_text(str(tmp_path / "small.txt")) == "hello"
    with pytest.raises(TooLargeError):
        fs.read_small_text(str(tmp_path / "big.json"), limit=10)
    with pytest.raises(FileNotFoundError):
        fs.read_small_text(str(tmp_path / "missing"))


def e_size(path: Path) -> int:
    return path.stat().st_size


def test_root_that_is_a_file(tmp_path: Path) -> None:
    touch(tmp_path / "f")
    found = discover(LocalFileSystem(), CheckpointConfig(root=str(tmp_path / "f")))
    assert found.checkpoints == () and "not a directory" in found.problems[0]
