"""Hugging Face Trainer checkpoints: `checkpoint-N/` with `trainer_state.json` and weights.

Trainer writes the model, then optimizer and scheduler, then `trainer_state.json`, so a parsable
state whose `global_step` matches the directory is the completion evidence. Weights are one file
(`model.safetensors`, `pytorch_model.bin`, a PEFT adapter), a sharded set listed by an
`*.index.json` (every listed shard must exist and be non-empty), an FSDP DCP dir, or DeepSpeed's
`global_stepN/` inside the checkpoint. Some versions save to `tmp-checkpoint-N` and rename.
"""

from __future__ import annotations

import re2

from goodput.checkpoints.dcp import check_dcp
from goodput.checkpoints.deepspeed import check_tag_dir
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.metadata import step_number, trainer_state_step, weight_map_shards
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, listing, read_json, strip_temp, temp_reason
from goodput.checkpoints.verify import verify_file

_CHECKPOINT = re2.compile(r"^checkpoint-([0-9]+)$")
SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_OPTIONAL = ("optimizer.pt", "scheduler.pt", "training_args.bin")
# Nested weight directories validated per checkpoint (FSDP dirs, DeepSpeed tags): each is a listing.
MAX_NESTED = 16


def _check_index(fs: FileSystem, path: str, index: str, names: dict[str, Entry], tally: Tally) -> None:
    shards = read_json(fs, join(path, index), index, tally, check=weight_map_shards)
    for shard in shards or ():
        entry = names.get(shard)
        if tally.nonempty(entry, f"shard {shard} listed in {index}") and entry is not None:
            verify_file(fs, join(path, shard), entry, f"shard {shard}", tally)


def _check_weights(fs: FileSystem, path: str, entries: list[Entry], tally: Tally) -> None:
    names = by_name(entries)
    indexes = [i for i in INDEXES if i in names]
    for index in indexes:
        _check_index(fs, path, index, names, tally)
    singles = [w for w in SINGLE_WEIGHTS if w in names]
    for weights in singles:
        if tally.nonempty(names[weights], weights):
            verify_file(fs, join(path, weights), names[weights], weights, tally)
    fsdp = [e for e in entries if e.is_dir and e.name.startswith("pytorch_model_fsdp")]
    for entry in fsdp[:MAX_NESTED]:
        shards = listing(fs, join(path, entry.name), tally, f"{entry.name}/")
        if shards is not None:
            check_dcp(fs, join(path, entry.name), shards, tally, where=entry.name)
    deepspeed = [e for e in entries if e.is_dir and e.name.startswith("global_step")]
    for entry in deepspeed[:MAX_NESTED]:
        tag_dir = listing(fs, join(path, entry.name), tally, f"{entry.name}/")
        if tag_dir is not None:
            check_tag_dir(fs, join(path, entry.name), tag_dir, tally, zero=False, where=entry.name)
    if len(fsdp) > MAX_NESTED or len(deepspeed) > MAX_NESTED:
        tally.problem(f"more than {MAX_NESTED} FSDP or DeepSpeed weight directories: not all checked")
    if not (indexes or singles or fsdp or deepspeed):
        tally.problem("no model weights (model.safetensors, pytorch_model.bin, a sharded index, "
                      "an FSDP or DeepSpeed directory)")


def _check_state(fs: FileSystem, path: str, step: int, tally: Tally) -> None:
    global_step = read_json(fs, join(path, "trainer_state.json"), "trainer_state.json", tally,
                            check=trainer_state_step)
    if global_step is not None and global_step != step:
        tally.problem(f"trainer_state.json says global_step {global_step}, the directory says {step}")


def _hf_step(name: str) -> int | None:
    match = _CHECKPOINT.match(strip_temp(name))
    return step_number(match.group(1)) if match else None


def discover_hf(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    candidates: list[tuple[int, str]] = []
    for entry in fs.list_dir(config.root):
        step = _hf_step(entry.name)
        if entry.is_dir and step is not None:
            candidates.append((step, entry.name))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    found: list[Checkpoint] = []
    for step, name in candidates[: config.max_candidates]:
        path = join(config.root, name)
        tally = Tally()
        entries = listing(fs, path, tally, f"{name}/")
        reason = temp_reason(name)
        if reason:
            tally.problem(reason)
        if entries is not None:
            names = by_name(entries)
            _check_state(fs, path, step, tally)
            _check_weights(fs, path, entries, tally)
            for optional in _OPTIONAL:
                if optional in names and tally.nonempty(names[optional], optional):
                    verify_file(fs, join(path, optional), names[optional], optional, tally)
            tally.see_all(entries)
        found.append(tally.build(path=path, step=step, layout="hf", tag=name))
    return found
