"""Which layout a checkpoint root uses, and the checkpoints under it, newest first.

Layouts are plugins in a table (name → discovery function); a job names one, or discovery tries
each in order and keeps the first that recognises anything. The order puts layouts with a
distinctive pointer file (Megatron's tracker, DeepSpeed's `latest`) before the DCP-based ones,
which would otherwise claim Megatron's distributed-format iterations. `generic` is never guessed:
it needs the job's pattern. Discovery sees the filesystem only through a view confined to the
root (`FileSystem.within`); an I/O error or a refusal that stops a layout (the root unreadable,
the per-root budget spent, a pattern RE2 rejects) is a problem of that root, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable

from goodput.checkpoints.dcp import discover_dcp, discover_nemo, discover_torchtitan
from goodput.checkpoints.deepspeed import LATEST, discover_deepspeed
from goodput.checkpoints.fs import FileSystem, RefusedError
from goodput.checkpoints.generic import discover_generic
from goodput.checkpoints.hf import discover_hf
from goodput.checkpoints.lightning import discover_lightning
from goodput.checkpoints.megatron import TRACKER, discover_megatron
from goodput.checkpoints.model import MAX_STEP_DIGITS, Checkpoint, CheckpointConfig, Discovery
from goodput.checkpoints.scan import os_reason, oversized_number, printable


def _dcp(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    return discover_dcp(fs, config)


Plugin = Callable[[FileSystem, CheckpointConfig], list[Checkpoint]]

LAYOUTS: dict[str, Plugin] = {
    "megatron": discover_megatron,
    "deepspeed": discover_deepspeed,
    "hf": discover_hf,
    "nemo": discover_nemo,
    "lightning": discover_lightning,
    "torchtitan": discover_torchtitan,
    "dcp": _dcp,
    "generic": discover_generic,
}
MAX_NOTES = 3
POINTERS = frozenset({LATEST, TRACKER})  # their layouts report a refused pointer themselves
AUTO_ORDER = ("megatron", "deepspeed", "hf", "nemo", "lightning", "torchtitan", "dcp")
ALIASES = {"nemo1": "megatron", "megatron-lm": "megatron", "huggingface": "hf", "transformers": "hf",
           "torch-dcp": "dcp", "pytorch-lightning": "lightning", "auto": None}


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


def _failure(error: Exception) -> str:
    if isinstance(error, OSError):
        where = f" ({printable(str(error.filename), 200)})" if error.filename else ""
        return f"I/O error: {os_reason(error)}{where}"
    return printable(str(error))


def _root_notes(fs: FileSystem, root: str) -> tuple[str, ...]:
    """Root entries no layout could judge: refused ones (a link out of the root, a FIFO) and
    names whose number cannot be a step. Said once per root, whatever the layout found."""
    try:
        entries = fs.list_dir(root)
    except (OSError, RefusedError):
        return ()
    notes: list[str] = []
    refused = [e for e in entries if e.refused and e.name not in POINTERS]
    for entry in refused[:MAX_NOTES]:
        notes.append(f"passed over {printable(entry.name, 80)}: {entry.refused}")
    if len(refused) > MAX_NOTES:
        notes.append(f"passed over {len(refused) - MAX_NOTES} more refused entries")
    oversized = [e.name for e in entries if oversized_number(e.name)]
    if oversized:
        notes.append(f"passed over {len(oversized)} entr{'y' if len(oversized) == 1 else 'ies'} whose number has "
                     f"more than {MAX_STEP_DIGITS} digits, so cannot be a step (e.g. {printable(oversized[0], 60)})")
    return tuple(notes)


def discover(fs: FileSystem, config: CheckpointConfig) -> Discovery:
    """The checkpoints under `config.root`, validated, newest first (at most `max_candidates`)."""
    try:
        layout = layout_name(config.layout)
    except ValueError as error:
        return Discovery(root=config.root, layout=None, problems=(str(error),))
    try:
        view = fs.within(config.root)
        root = view.stat(config.root)
    except (OSError, RefusedError) as error:
        return Discovery(root=config.root, layout=layout, problems=(f"{config.root}: {_failure(error)}",))
    if root is None or not root.is_dir:
        why = f": {root.refused}" if root is not None and root.refused else ""
        return Discovery(root=config.root, layout=layout, problems=(f"{config.root} is not a directory{why}",))
    names = (layout,) if layout else AUTO_ORDER
    for name in names:
        try:
            found = LAYOUTS[name](view, config)
        except (OSError, RefusedError) as error:
            return Discovery(root=config.root, layout=name, problems=(f"{name}: {_failure(error)}",))
        if found or layout:
            return Discovery(root=config.root, layout=name, checkpoints=newest_first(found),
                             problems=_root_notes(view, config.root))
    return Discovery(root=config.root, layout=None,
                     problems=(f"no checkpoint layout recognised under {config.root} (tried {', '.join(names)})",
                               *_root_notes(view, config.root)))
