"""`python -m benchmarks checkpoints [--json] [--shards N] [--out F]`: what validating a checkpoint costs.

Checkpoint validation must stay cheap on multi-terabyte checkpoints: it lists directories, stats
files and reads headers and end records, never shard data. This builds, on local disk, one
checkpoint of N shards (default 10,000) per layout, each shard a sparse file of 1 GiB with the
real format's head and tail (so the tree claims ~10 TiB per checkpoint and costs almost no disk),
plus a second copy with one shard truncated, and runs the shipped discovery (default limits) on
each: files listed, files opened, bytes read against the bytes the checkpoint holds, wall time
(repeated; the page cache is warm, so this is the CPU and syscall cost, not a cold parallel
filesystem's latency), and whether the truncated copy was refused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks._git import commit
from goodput.checkpoints import CheckpointConfig, LocalFileSystem, find_resume_point
from tests.fakes.checkpoint_bytes import dcp_metadata, safetensors_head, torch_zip

GIB = 1 << 30
LATER = datetime.now(UTC) + timedelta(days=1)


def _sparse(path: Path, size: int, head: bytes = b"", tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        out.write(head)
        if tail:
            out.seek(size - len(tail))
            out.write(tail)
        out.truncate(size)


def build_dcp(root: Path, shards: int) -> Path:
    step = root / "step-1000"
    files = {f"__{rank}_0.distcp": GIB for rank in range(shards)}
    for name, size in files.items():
        _sparse(step / name, size)
    (step / ".metadata").write_bytes(dcp_metadata(files))
    return step / "__0_0.distcp"


def build_hf(root: Path, shards: int) -> Path:
    step = root / "checkpoint-1000"
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    for name in names:
        _sparse(step / name, GIB, head=safetensors_head(GIB))
    weight_map = {f"layer.{i}.weight": name for i, name in enumerate(names)}
    (step / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (step / "trainer_state.json").write_text('{"global_step": 1000}')
    return step / names[-1]


def build_deepspeed(root: Path, shards: int) -> Path:
    tag = root / "global_step1000"
    head, tail = torch_zip(GIB, {"dp_world_size": shards, "mp_world_size": 1})
    _sparse(tag / "mp_rank_00_model_states.pt", GIB, head, tail)
    head, tail = torch_zip(GIB)
    for rank in range(shards):
        _sparse(tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", GIB, head, tail)
    (root / "latest").write_text("global_step1000")
    return tag / f"bf16_zero_pp_rank_{shards - 1}_mp_rank_00_optim_states.pt"


def build_megatron(root: Path, shards: int) -> Path:
    tp = max(1, int(shards ** 0.5))
    pp = max(1, shards // tp)
    iteration = root / "iter_0001000"
    head, tail = torch_zip(GIB)
    for t in range(tp):
        for p in range(pp):
            _sparse(iteration / f"mp_rank_{t:02d}_{p:03d}" / "model_optim_rng.pt", GIB, head, tail)
    (root / "latest_checkpointed_iteration.txt").write_text("1000")
    return iteration / f"mp_rank_{tp - 1:02d}_{pp - 1:03d}" / "model_optim_rng.pt"


BUILDERS: dict[str, Callable[[Path, int], Path]] = {
    "dcp": build_dcp, "hf": build_hf, "deepspeed": build_deepspeed, "megatron": build_megatron,
}


def measure(layout: str, shards: int, repeats: int, scratch: Path) -> dict[str, object]:
    root = scratch / layout
    victim = BUILDERS[layout](root, shards)
    config = CheckpointConfig(root=str(root), layout=layout)
    times: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        found, choice = find_resume_point(LocalFileSystem(), config, LATER)
        times.append(time.perf_counter() - started)
    (checkpoint,) = found.checkpoints
    with victim.open("r+b") as shard:  # a writer killed half-way through its last shard
        shard.truncate(GIB // 2)
    _, damaged = find_resume_point(LocalFileSystem(), config, LATER)
    return {
        "shards": shards, "complete": checkpoint.complete, "files_checked": checkpoint.files_checked,
        "total_bytes": checkpoint.total_bytes, "files_read": checkpoint.files_read,
        "bytes_read": checkpoint.bytes_read, "read_ratio": checkpoint.bytes_read / checkpoint.total_bytes,
        "bytes_read_per_shard": checkpoint.bytes_read / shards,
        "seconds_median": statistics.median(times), "seconds_max": max(times),
        "us_per_shard_median": statistics.median(times) / shards * 1e6,
        "truncated_refused": damaged.checkpoint is None,
        "chosen_ok": choice.checkpoint is not None,
    }


def run(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks checkpoints")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layout", action="append", choices=sorted(BUILDERS), default=[])
    parser.add_argument("--out", help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="goodput-ckpt-bench-"))
    try:
        layouts = args.layout or list(BUILDERS)
        result = {"commit": commit("goodput/checkpoints", "benchmarks"), "date": datetime.now(UTC).date().isoformat(),
                  "cpus": os.cpu_count(), "repeats": args.repeats,
                  "layouts": {layout: measure(layout, args.shards, args.repeats, scratch) for layout in layouts}}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return
    print(f"checkpoint validation cost, {args.shards} shards of 1 GiB per checkpoint, commit {result['commit']}")
    for layout, row in result["layouts"].items():
        print(f"  {layout:<10} read {row['files_read']:>6} files, {row['bytes_read'] / 1e6:8.2f} MB of "
              f"{row['total_bytes'] / 2**40:.1f} TiB (ratio {row['read_ratio']:.1e}); "
              f"{row['seconds_median']:.2f} s median ({row['us_per_shard_median']:.0f} us/shard); "
              f"truncated shard refused: {row['truncated_refused']}")
