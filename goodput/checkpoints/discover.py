"""Which layout a checkpoint root uses, and the checkpoints under it, newest first.

Layouts are plugins in a table (name → discovery function); a job names one, or discovery tries
each in order and keeps the first that recognises anything. The order puts layouts with a
distinctive pointer file (Megatron's tracker, DeepSpeed's `latest`) before the DCP-based ones,
which would otherwise claim Megatron's distributed-format iterations. `generic` is never guessed:
it needs the job's pattern. An I/O error while validating is a problem of that root, not a crash.
"""

from __future__ import annotations

from collections.abc import Callable

from goodput.checkpoints.dcp import discover_dcp, discover_nemo, discover_torchtitan
from goodput.checkpoints.deepspeed import discover_deepspeed
from goodput.checkpoints.fs import FileSystem
from goodput.checkpoints.generic import discover_generic
from goodput.checkpoints.hf import discover_hf
from goodput.checkpoints.megatron import discover_megatron
from goodput.checkpoints.model import Checkpoint, CheckpointConfig, Discovery


def _dcp(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    return discover_dcp(fs, config)


Plugin = Callable[[FileSystem, CheckpointConfig], list[Checkpoint]]

LAYOUTS: dict[str, Plugin] = {
    "megatron": discover_megatron,
    "deepspeed": discover_deepspeed,
    "hf": discover_hf,
    "nemo": discover_nemo,
    "torchtitan": discover_torchtitan,
    "dcp": _dcp,
    "generic": discover_generic,
}
AUTO_ORDER = ("megatron", "deepspeed", "hf", "nemo", "torchtitan", "dcp")
ALIASES = {"nemo1": "megatron", "megatron-lm": "megatron", "huggingface": "hf", "transformers": "hf",
           "torch-dcp": "dcp", "auto": None}


def layout_name(name: str | None) -> str | None:
    """The canonical layout for a configured name (None: auto). Raises ValueError if unknown."""
    if name is None:
        return None
    lowered = name.strip().lower()
    if lowered in ALIASES:
        return ALIASES[lowered]
    if lowered not in LAYOUTS:
        raise ValueError(f"unknown checkpoint layout {name!r}; known: {', '.join(sorted(LAYOUTS))}, auto")
    return lowered


def newest_first(checkpoints: list[Checkpoint]) -> tuple[Checkpoint, ...]:
    """Highest step first; at one step, the incomplete copy (a leftover `.tmp`) before the good one."""
    return tuple(sorted(checkpoints, key=lambda c: (-c.step, c.complete, c.path)))


def discover(fs: FileSystem, config: CheckpointConfig) -> Discovery:
    """The checkpoints under `config.root`, validated, newest first (at most `max_candidates`)."""
    try:
        layout = layout_name(config.layout)
    except ValueError as error:
        return Discovery(root=config.root, layout=None, problems=(str(error),))
    root = fs.stat(config.root)
    if root is None or not root.is_dir:
        return Discovery(root=config.root, layout=layout, problems=(f"{config.root} is not a directory",))
    names = (layout,) if layout else AUTO_ORDER
    for name in names:
        try:
            found = LAYOUTS[name](fs, config)
        except OSError as error:
            return Discovery(root=config.root, layout=name, problems=(f"{name}: I/O error: {error}",))
        if found or layout:
            return Discovery(root=config.root, layout=name, checkpoints=newest_first(found))
    return Discovery(root=config.root, layout=None,
                     problems=(f"no checkpoint layout recognised under {config.root} (tried {', '.join(names)})",))
