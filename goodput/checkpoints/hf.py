"""Hugging Face Trainer checkpoints: `checkpoint-N/` with `trainer_state.json` and weights.

Trainer writes the model, then optimizer and scheduler, then `trainer_state.json`, so a parsable
state whose `global_step` matches the directory is the completion evidence. Weights are one file
(`model.safetensors`, `pytorch_model.bin`, a PEFT adapter), a sharded set listed by an
`*.index.json` (every listed shard must exist and be non-empty), an FSDP DCP dir, or DeepSpeed's
`global_stepN/` inside the checkpoint. Some versions save to `tmp-checkpoint-N` and rename.
"""

from __future__ import annotations

import re

from goodput.checkpoints.dcp import check_dcp
from goodput.checkpoints.deepspeed import check_tag_dir
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, read_json, strip_temp, temp_reason

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_OPTIONAL = ("optimizer.pt", "scheduler.pt", "training_args.bin")


def _check_index(fs: FileSystem, path: str, index: str, names: dict[str, Entry], tally: Tally) -> None:
    data = read_json(fs, join(path, index), index, tally)
    if data is None:
        return
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        tally.problems.append(f"{index} has no weight_map")
        return
    for shard in sorted({str(v) for v in weight_map.values()}):
        tally.nonempty(names.get(shard), f"shard {shard} listed in {index}")


def _check_weights(fs: FileSystem, path: str, entries: list[Entry], tally: Tally) -> None:
    names = by_name(entries)
    indexes = [i for i in INDEXES if i in names]
    for index in indexes:
        _check_index(fs, path, index, names, tally)
    singles = [w for w in SINGLE_WEIGHTS if w in names]
    for weights in singles:
        tally.nonempty(names[weights], weights)
    fsdp = [e for e in entries if e.is_dir and e.name.startswith("pytorch_model_fsdp")]
    for entry in fsdp:
        check_dcp(fs.list_dir(join(path, entry.name)), tally, where=entry.name)
    deepspeed = [e for e in entries if e.is_dir and e.name.startswith("global_step")]
    for entry in deepspeed:
        check_tag_dir(fs.list_dir(join(path, entry.name)), tally, zero=False, where=entry.name)
    if not (indexes or singles or fsdp or deepspeed):
        tally.problems.append("no model weights (model.safetensors, pytorch_model.bin, a sharded index, "
                              "an FSDP or DeepSpeed directory)")


def _check_state(fs: FileSystem, path: str, step: int, tally: Tally) -> None:
    state = read_json(fs, join(path, "trainer_state.json"), "trainer_state.json", tally)
    if state is None:
        return
    global_step = state.get("global_step") if isinstance(state, dict) else None
    if not isinstance(global_step, int) or isinstance(global_step, bool):
        tally.problems.append("trainer_state.json has no integer global_step")
    elif global_step != step:
        tally.problems.append(f"trainer_state.json says global_step {global_step}, the directory says {step}")


def discover_hf(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    candidates: list[tuple[int, str]] = []
    for entry in fs.list_dir(config.root):
        match = _CHECKPOINT.match(strip_temp(entry.name))
        if entry.is_dir and match:
            candidates.append((int(match.group(1)), entry.name))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    found: list[Checkpoint] = []
    for step, name in candidates[: config.max_candidates]:
        path = join(config.root, name)
        tally = Tally()
        reason = temp_reason(name)
        if reason:
            tally.problems.append(reason)
        entries = fs.list_dir(path)
        names = by_name(entries)
        _check_state(fs, path, step, tally)
        _check_weights(fs, path, entries, tally)
        for optional in _OPTIONAL:
            if optional in names:
                tally.nonempty(names[optional], optional)
        tally.see_all(entries)
        found.append(tally.build(path=path, step=step, layout="hf", tag=name))
    return found
