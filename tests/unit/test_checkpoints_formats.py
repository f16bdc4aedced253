"""Truncated and damaged shards are caught from their own formats, and no pickle is ever run.

Each case damages a checkpoint the way real failures do (a writer killed mid-file, a full
filesystem, a zeroed preallocation) and requires the resume point to fall back to the previous
whole checkpoint, with the reason named. The pickles are read by goodput.checkpoints.safepickle,
which interprets opcodes as data; a booby-trapped `.metadata` proves it.
"""

from __future__ import annotations

import pickle
import pickletools
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints import CheckpointConfig, LocalFileSystem, find_resume_point
from goodput.checkpoints.formats import (
    FormatError,
    dcp_storage_ends,
    pickle_top_level,
    safetensors_expected_size,
    safetensors_header_length,
    zip_directory,
)
from goodput.checkpoints.safepickle import Call, Global, PickleError, read_pickle
from tests.fakes.checkpoint_bytes import dcp_metadata, file_bytes, safetensors_head, torch_zip
from tests.fakes.filesystem import MB, FakeFileSystem, write_dcp, write_deepspeed, write_hf, write_megatron

pytestmark = pytest.mark.timeout(30)
ROOT = "/ckpt"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
LATER = datetime.now(UTC) + timedelta(hours=1)


def choose(fs: FakeFileSystem, layout: str | None = None) -> tuple[int | None, str]:
    _, choice = find_resume_point(fs, CheckpointConfig(root=ROOT, layout=layout), NOW)
    return (choice.checkpoint.step if choice.checkpoint else None), choice.explanation


# The format rules, on bytes -----------------------------------------------------------------------

def test_safetensors_size_comes_from_its_header() -> None:
    head = safetensors_head(4096)
    length = safetensors_header_length(head, 4096)
    assert safetensors_expected_size(head[8:], length) == 4096
    with pytest.raises(FormatError, match="zeros, or another format"):
        safetensors_header_length(b"\0" * 8, 4096)
    with pytest.raises(FormatError, match="truncated: its header alone"):
        safetensors_header_length(head, 40)
    with pytest.raises(FormatError, match="data_offsets"):
        safetensors_expected_size(b'{"w": {"data_offsets": [5, 1]}}', 31)


def test_a_zip_cut_anywhere_has_no_end_record_at_its_end() -> None:
    head, tail = torch_zip(2048)
    whole = head + b"\0" * (2048 - len(head) - len(tail)) + tail
    assert zip_directory(whole[-1000:], len(whole)).entries == 2
    for cut in (len(whole) - 1, len(whole) - 22, len(whole) - 100, 1500, 100):
        with pytest.raises(FormatError, match="no zip end-of-central-directory"):
            zip_directory(whole[:cut][-1000:], cut)


def test_dcp_metadata_byte_ranges_match_what_torch_writes() -> None:
    """The opcodes of torch 2.13's own `.metadata` (recorded from `dcp.save` of two tensors and an
    int): Metadata and _StorageInfo built by NEWOBJ then BUILD with their fields as state."""
    ends = dcp_storage_ends(dcp_metadata({"__0_0.distcp": 4415, "__1_0.distcp": 10}))
    assert ends == {"__0_0.distcp": 4415, "__1_0.distcp": 10}
    with pytest.raises(FormatError, match="does not hold a DCP Metadata"):
        dcp_storage_ends(pickle.dumps({"storage_data": {}}))
    with pytest.raises(FormatError, match="cannot be read"):
        dcp_storage_ends(b"m" * 32)


def test_a_metadata_naming_a_shard_outside_the_checkpoint_is_refused() -> None:
    with pytest.raises(FormatError, match="outside the checkpoint"):
        dcp_storage_ends(dcp_metadata({"../../etc/shadow": 10}))


def test_data_pkl_fields_are_read_as_data() -> None:
    assert pickle_top_level(pickle.dumps({"dp_world_size": 8, "global_step": 3, 7: "x"}, protocol=2)) == \
        {"dp_world_size": 8, "global_step": 3}


# The reader never runs a pickle ----------------------------------------------------------------

class _Trap:
    """Unpickling this creates the file at `path`: `open(path, "w")`, as a hostile user would."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def test_a_booby_trapped_metadata_is_read_never_run(tmp_path: Path) -> None:
    created = tmp_path / "pwned"
    trap = pickle.dumps(_Trap(str(created)))
    pickle.loads(trap).close()  # the trap is real: unpickling creates the file
    assert created.exists()
    created.unlink()

    root = tmp_path / "ckpt"
    for step in (1, 2):
        (root / f"step-{step}").mkdir(parents=True)
        (root / f"step-{step}" / "__0_0.distcp").write_bytes(b"x" * 16)
    (root / "step-1" / ".metadata").write_bytes(dcp_metadata({"__0_0.distcp": 16}))
    (root / "step-2" / ".metadata").write_bytes(trap)
    (root / "step-2" / "model.pt").write_bytes(trap)  # and a torch file that is a bare pickle
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root), layout="dcp"), LATER)
    assert not created.exists()
    assert choice.checkpoint is not None and choice.checkpoint.step == 1
    assert "does not hold a DCP Metadata object" in choice.explanation
    assert isinstance(read_pickle(trap), Call) and read_pickle(trap).func == Global("io", "open")


def test_refused_opcodes_and_malformed_pickles_raise_pickle_error() -> None:
    ext = b"\x80\x02\x82\x01."  # EXT1: the copyreg extension registry
    persistent_key = b"\x80\x02}(]\x94K\x01u."  # a list used as a dict key
    for data in (ext, b"", b"\x80\x02", b"\x80\x02(.", b"\x80\x02t.", b"\x80\x02h\x05.", persistent_key,
                 b"\x80\x04\x95" + b"\xff" * 8):
        with pytest.raises(PickleError):
            read_pickle(data)


def test_a_key_shared_exponentially_through_the_memo_is_refused_fast() -> None:
    """32 levels of a tuple holding its predecessor twice: 2**32 items if hashed; refused instead."""
    ops = bytearray(b"\x80\x02K\x01\x85\x940")  # (1,) memoized as 0, popped
    for level in range(32):
        ops += b"h" + bytes([level]) + b"h" + bytes([level]) + b"\x86\x940"  # (t, t), memoized, popped
    ops += b"}h" + bytes([32]) + b"K\x01s."  # {t: 1}
    assert [op.name for op, _, _ in pickletools.genops(bytes(ops))][-1] == "STOP"  # well-formed
    with pytest.raises(PickleError, match="dict key"):
        read_pickle(bytes(ops))


# Damaged checkpoints, each layout --------------------------------------------------------------

def test_truncated_dcp_shard_falls_back_to_the_previous_step() -> None:
    fs = FakeFileSystem()
    write_dcp(fs, f"{ROOT}/step-500")
    write_dcp(fs, f"{ROOT}/step-1000")
    fs.truncate(f"{ROOT}/step-1000/__3_0.distcp", 40 * MB)
    step, why = choose(fs)
    assert step == 500 and "__3_0.distcp is truncated: .metadata records bytes up to 67108864" in why


def test_a_shard_metadata_names_but_the_listing_lacks_is_missing() -> None:
    fs = FakeFileSystem()
    write_dcp(fs, f"{ROOT}/step-500", ranks=2)
    write_dcp(fs, f"{ROOT}/step-1000", ranks=2)
    fs.add_file(f"{ROOT}/step-1000/.metadata", head=dcp_metadata({"__0_0.distcp": 64 * MB, "__1_0.distcp": 64 * MB,
                                                                  "__2_0.distcp": 64 * MB}))
    step, why = choose(fs)
    assert step == 500 and "shard __2_0.distcp, named in .metadata, is missing" in why


@pytest.mark.parametrize("cut", [1, 4096, 256 * MB, 512 * MB - 1])
def test_truncated_safetensors_falls_back(cut: int) -> None:
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    fs.truncate(f"{ROOT}/checkpoint-1000/model.safetensors", cut)
    step, why = choose(fs)
    assert step == 500 and "model.safetensors:" in why


def test_truncated_sharded_safetensors_and_optimizer_fall_back() -> None:
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 500, shards=3)
    write_hf(fs, ROOT, 1000, shards=3)
    fs.truncate(f"{ROOT}/checkpoint-1000/model-00002-of-00003.safetensors", 100 * MB)
    step, why = choose(fs)
    assert step == 500 and "shard model-00002-of-00003.safetensors: truncated" in why
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 500)
    write_hf(fs, ROOT, 1000)
    fs.truncate(f"{ROOT}/checkpoint-1000/optimizer.pt", MB // 2)
    step, why = choose(fs)
    assert step == 500 and "optimizer.pt: truncated: no zip end-of-central-directory record" in why


def test_truncated_megatron_rank_file_falls_back() -> None:
    fs = FakeFileSystem()
    write_megatron(fs, ROOT, 500)
    write_megatron(fs, ROOT, 1000)
    fs.truncate(f"{ROOT}/iter_0001000/mp_rank_01/model_optim_rng.pt", 100 * MB)
    step, why = choose(fs)
    assert step == 500 and "mp_rank_01/model_optim_rng.pt: truncated" in why


def test_deepspeed_latest_naming_a_save_whose_last_ranks_never_wrote_is_passed_over() -> None:
    """Ranks 2 and 3 of 4 died before writing: no gap in 0..1, but the model states say 4."""
    fs = FakeFileSystem()
    write_deepspeed(fs, ROOT, 500, dp=4)
    write_deepspeed(fs, ROOT, 1000, dp=4)
    for rank in (2, 3):
        fs.remove(f"{ROOT}/global_step1000/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    step, why = choose(fs)
    assert step == 500
    assert "optimizer shards of data-parallel rank(s) [2, 3] missing for mp_rank_00; the model states record 4" in why


def test_a_zeroed_torch_file_is_not_a_torch_file() -> None:
    fs = FakeFileSystem()
    write_deepspeed(fs, ROOT, 500)
    write_deepspeed(fs, ROOT, 1000)
    fs.add_file(f"{ROOT}/global_step1000/mp_rank_00_model_states.pt", size=32 * MB)  # preallocated, never written
    step, why = choose(fs)
    assert step == 500 and "neither a zip archive nor a pickle" in why


def test_validation_reports_what_it_read_and_reads_only_edges() -> None:
    fs = FakeFileSystem()
    write_dcp(fs, f"{ROOT}/step-1000", ranks=8)
    write_hf(fs, f"{ROOT}/hf", 20, shards=4)
    found, _ = find_resume_point(fs, CheckpointConfig(root=ROOT, layout="dcp"), NOW)
    dcp = found.checkpoints[0]
    assert dcp.files_read == 1 and 0 < dcp.bytes_read < 4096 and dcp.total_bytes > 8 * 64 * MB
    found, _ = find_resume_point(fs, CheckpointConfig(root=f"{ROOT}/hf"), NOW)
    hf = found.checkpoints[0]
    # index + trainer_state + 4 shards' headers + optimizer.pt's head and tail
    assert hf.files_read == 7 and hf.bytes_read < 200_000 and hf.total_bytes > 4 * 512 * MB


def test_a_legacy_torch_file_is_unverified_not_rejected(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    for step in (100, 200):
        path = root / f"iter_{step:07d}" / "mp_rank_00" / "model_optim_rng.pt"
        path.parent.mkdir(parents=True)
        path.write_bytes(pickle.dumps({"legacy": True}, protocol=2) + struct.pack("<Q", 0))
    (root / "latest_checkpointed_iteration.txt").write_text("200")
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root)), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 200
    assert any("legacy (non-zip) torch file" in u for u in choice.checkpoint.unverified)


def test_whole_files_on_disk_pass(tmp_path: Path) -> None:
    root = tmp_path / "ckpt" / "checkpoint-7"
    root.mkdir(parents=True)
    (root / "model.safetensors").write_bytes(file_bytes("model.safetensors", 3000))
    (root / "optimizer.pt").write_bytes(file_bytes("optimizer.pt", 3000))
    (root / "trainer_state.json").write_text('{"global_step": 7}')
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root.parent)), LATER)
    assert choice.checkpoint is not None and choice.checkpoint.step == 7, choice.explanation
    (root / "model.safetensors").write_bytes(file_bytes("model.safetensors", 3000) + b"\0")
    _, choice = find_resume_point(LocalFileSystem(), CheckpointConfig(root=str(root.parent)), LATER)
    assert choice.checkpoint is None and "longer than the 3000 its header describes" in choice.explanation
