"""PyTorch Lightning `ModelCheckpoint` files: `epoch=E-step=N.ckpt` and `last.ckpt`.

Lightning keeps the top-k checkpoints *by a monitored metric* and, with `save_last`, a `last.ckpt`
that is a copy of (or, with `save_last="link"`, a symbolic link to) the newest save. With top-k by
metric the newest step is often not among the named files, so `last.ckpt` is the resume point,
and its step is not in its name: it is the `global_step` Lightning recorded in the file's
`data.pkl` (read as data, never unpickled; see goodput.checkpoints.verify). A `.ckpt` is a torch
zip, so a truncated one has no end records. Sharded strategies (FSDP, DeepSpeed) save a directory
of the same name, checked as DCP (or for at least one non-empty file). NeMo 1 on Lightning names
files `<name>--<metric>-step=N-…ckpt`: the same rules apply to them.
"""

from __future__ import annotations

import re2

from goodput.checkpoints.dcp import check_dcp, looks_like_dcp
from goodput.checkpoints.formats import ZipDirectory
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.metadata import step_number
from goodput.checkpoints.model import MAX_STEP, Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, listing, temp_reason
from goodput.checkpoints.verify import torch_file_fields, verify_file

_STEP = re2.compile(r"(?:^|[^a-z])step=([0-9]+)")
_LAST = re2.compile(r"^(?:.*-)?last(?:-v[0-9]+)?\.ckpt$")


def is_last(name: str) -> bool:
    return bool(_LAST.match(name))


def named_step(name: str) -> int | None:
    match = _STEP.search(name)
    return step_number(match.group(1)) if match else None


def looks_like_lightning(entries: list[Entry]) -> bool:
    return any(e.name.endswith(".ckpt") and (is_last(e.name) or named_step(e.name) is not None)
               for e in entries if not e.refused)


def _recorded_step(fs: FileSystem, path: str, entry: Entry, where: ZipDirectory, tally: Tally) -> int | None:
    fields = torch_file_fields(fs, path, where, entry.name, tally)
    step = (fields or {}).get("global_step")
    if isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_STEP:
        return step
    if fields is not None:
        tally.problem(f"{entry.name} records no global_step, so its step is unknown")
    return None


def _check_sharded(fs: FileSystem, path: str, entry: Entry, tally: Tally) -> None:
    inner = listing(fs, path, tally, f"{entry.name}/")
    if inner is None:
        return
    if looks_like_dcp(inner):
        check_dcp(fs, path, inner, tally)
    elif not any(e.size > 0 and not e.is_dir and not e.refused for e in inner):
        tally.problem(f"{entry.name}/ holds no non-empty file")
    tally.see_all(inner)


def _validate(fs: FileSystem, root: str, entry: Entry, step: int | None, last: bool) -> Checkpoint:
    path = join(root, entry.name)
    tally = Tally()
    reason = temp_reason(entry.name)
    if reason:
        tally.problem(reason)
    if entry.is_dir:
        _check_sharded(fs, path, entry, tally)
    elif tally.nonempty(entry, entry.name):
        where = verify_file(fs, path, entry, entry.name, tally)
        if last and where is not None and not tally.problems:
            step = _recorded_step(fs, path, entry, where, tally)
    if step is None:
        if not tally.problems:
            tally.problem(f"{entry.name}: its step is in its data.pkl, which was not read"
                          if not entry.is_dir else f"{entry.name}/: a sharded last checkpoint, whose step is "
                          "in no name or file goodput reads; resume from it by name")
        step = 0
    return tally.build(path=path, step=step, layout="lightning", tag=entry.name, pointer=last)


def discover_lightning(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    entries = [e for e in fs.list_dir(config.root) if e.name.endswith(".ckpt") and not e.refused]
    named = sorted(((s, e) for e in entries if not is_last(e.name) and (s := named_step(e.name)) is not None),
                   key=lambda item: (-item[0], item[1].name))
    lasts = sorted((e for e in entries if is_last(e.name)), key=lambda e: e.name)
    found = [_validate(fs, config.root, entry, None, last=True) for entry in lasts[: config.max_candidates]]
    found += [_validate(fs, config.root, entry, step, last=False) for step, entry in named[: config.max_candidates]]
    return found
