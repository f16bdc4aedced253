"""The cost property: discovery never opens a shard, only lists, stats and reads small metadata.

Random trees of every layout (seeded, so failures reproduce), damaged at random, are discovered
through the fake filesystem, which raises on any read of a shard, of opaque content, or of more
than metadata size; and the files it did read are only the layouts' metadata and pointer files.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from goodput.checkpoints import AUTO_ORDER, LAYOUTS, CheckpointConfig, choose_resume_point, discover
from goodput.checkpoints.fs import SMALL_TEXT_LIMIT
from tests.fakes.filesystem import (
    DEFAULT_MTIME,
    FakeFileSystem,
    ForbiddenReadError,
    write_dcp,
    write_deepspeed,
    write_generic,
    write_hf,
    write_megatron,
    write_megatron_dist,
)

ROOT = "/ckpt"
NOW = datetime.fromtimestamp(DEFAULT_MTIME + 3600, UTC)
METADATA_NAMES = {"latest_checkpointed_iteration.txt", "latest", "trainer_state.json", "metadata.json",
                  "model.safetensors.index.json", "pytorch_model.bin.index.json"}


def random_tree(rng: random.Random) -> FakeFileSystem:
    fs = FakeFileSystem()
    kind = rng.choice(["megatron", "megatron-dist", "deepspeed", "hf", "dcp", "torchtitan", "generic"])
    steps = sorted(rng.sample(range(1, 5000), rng.randint(1, 6)))
    for step in steps:
        mtime = rng.choice([None, DEFAULT_MTIME + 3600 - rng.uniform(0, 300)])
        if kind == "megatron":
            path = write_megatron(fs, ROOT, step, tp=rng.randint(1, 3), pp=rng.randint(1, 2), mtime=mtime)
        elif kind == "megatron-dist":
            path = write_megatron_dist(fs, ROOT, step, ranks=rng.randint(1, 4), mtime=mtime)
        elif kind == "deepspeed":
            path = write_deepspeed(fs, ROOT, step, mp=rng.randint(1, 2), dp=rng.randint(0, 3), mtime=mtime)
        elif kind == "hf":
            path = write_hf(fs, ROOT, step, shards=rng.randint(0, 3), mtime=mtime)
        elif kind == "dcp":
            path = write_dcp(fs, f"{ROOT}/{rng.choice(['step-', 'global_step', 'checkpoint_'])}{step}", mtime=mtime)
        elif kind == "torchtitan":
            path = write_dcp(fs, f"{ROOT}/checkpoint/step-{step}", mtime=mtime)
        else:
            path = write_generic(fs, ROOT, f"ckpt_{step}", marker=rng.choice([".complete", None]), mtime=mtime)
        _damage(fs, rng, path)
    if rng.random() < 0.2:
        fs.add_file(f"{ROOT}/{rng.choice(['latest', 'latest_checkpointed_iteration.txt'])}",
                    text=rng.choice(["", "release", "garbage\n", str(steps[-1] + 100)]))
    return fs


def _damage(fs: FakeFileSystem, rng: random.Random, path: str) -> None:
    files = [p for p in fs.paths() if p.startswith(path + "/")]
    roll = rng.random()
    if roll < 0.15 and files:
        fs.add_file(rng.choice(files), size=0)
    elif roll < 0.3 and files:
        fs.remove(rng.choice(files))
    elif roll < 0.4 and files:
        target = rng.choice(files)
        fs.add_file(target, text="{not json", size=None) if target.endswith(".json") else fs.add_file(target, size=0)
    elif roll < 0.45:
        fs.add_file(f"{path}/huge.json", size=SMALL_TEXT_LIMIT * 1000)


@pytest.mark.parametrize("seed", range(150))
def test_discovery_reads_only_small_metadata(seed: int) -> None:
    rng = random.Random(seed)
    fs = random_tree(rng)
    for layout in (None, *LAYOUTS):
        config = CheckpointConfig(root=ROOT, layout=layout)
        found = discover(fs, config)  # raises ForbiddenReadError on any forbidden read
        choice = choose_resume_point(found.checkpoints, NOW, 120)
        if choice.checkpoint is not None:
            assert choice.checkpoint.complete
    names = {path.rsplit("/", 1)[-1] for path in fs.reads}
    assert names <= METADATA_NAMES, names


def test_the_fake_polices_reads() -> None:
    fs = FakeFileSystem()
    write_hf(fs, ROOT, 1)
    with pytest.raises(ForbiddenReadError):
        fs.read_small_text(f"{ROOT}/checkpoint-1/model.safetensors")
    with pytest.raises(ForbiddenReadError):
        fs.read_small_text(f"{ROOT}/checkpoint-1/trainer_state.json", limit=1 << 30)
    fs.add_file(f"{ROOT}/opaque", size=10)
    with pytest.raises(ForbiddenReadError):
        fs.read_small_text(f"{ROOT}/opaque")
    assert fs.read_small_text(f"{ROOT}/checkpoint-1/trainer_state.json").startswith("{")
    assert fs.reads == [f"{ROOT}/checkpoint-1/trainer_state.json"]


def test_auto_order_covers_every_layout_but_generic() -> None:
    assert set(AUTO_ORDER) == set(LAYOUTS) - {"generic"}
