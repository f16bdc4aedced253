"""PyTorch Distributed Checkpoint (DCP) directories, and the layouts built on them.

torch.distributed.checkpoint writes one `__<rank>_<n>.distcp` file per rank (and writer thread)
and the coordinator writes `.metadata` last, so `.metadata` is the commit marker: shards without
it are a save that never finished. The shard set is checked for empty files, gaps in the rank
numbers, and ranks missing a writer thread's file (megatron-core writes `__<rank>_<thread>.distcp`
per rank and per writer thread, so every rank has the same threads). `.metadata` records every
shard's byte ranges, so it is read (as data, never unpickled: goodput.checkpoints.safepickle) and
each shard must exist and reach the end of its last range: that catches a truncated shard.
torchtitan (`step-N/`
under the dump folder's `checkpoint/`) and NeMo 2 (`...step=N.../weights/`) are DCP underneath.
"""

from __future__ import annotations

from collections.abc import Callable

import re2

from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.metadata import step_number
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import (
    Tally,
    by_name,
    first_missing,
    listing,
    missing_cells,
    step_from_name,
    strip_temp,
    temp_reason,
)
from goodput.checkpoints.verify import verify_dcp, verify_file

_SHARD = re2.compile(r"^__([0-9]+)_([0-9]+)\.distcp$")
_TORCHTITAN = re2.compile(r"^step-([0-9]+)$")
_NEMO = re2.compile(r"step=([0-9]+)")

# A checkpoint directory's name to its step (None: not a checkpoint of this layout).
StepRule = Callable[[str], int | None]


def _torchtitan_step(name: str) -> int | None:
    match = _TORCHTITAN.match(strip_temp(name))
    return step_number(match.group(1)) if match else None


def looks_like_dcp(entries: list[Entry]) -> bool:
    return any(e.name == ".metadata" or _SHARD.match(e.name) for e in entries if not e.is_dir)


def check_dcp(fs: FileSystem, directory: str, entries: list[Entry], tally: Tally, where: str = "") -> None:
    """Validates one DCP directory: `.metadata` present and non-empty, shards non-empty, rank
    numbers 0..R-1 without gaps, every shard as long as `.metadata` records."""
    names = by_name(entries)
    _check_listing(names, entries, tally, where)
    verify_dcp(fs, directory, names, tally, f"{where}/" if where else "")


def _check_listing(names: dict[str, Entry], entries: list[Entry], tally: Tally, where: str) -> None:
    prefix = f"{where}/" if where else ""
    metadata = names.get(".metadata")
    if metadata is None:
        tally.problem(f"{prefix}.metadata is missing: DCP writes it last, so this save did not finish")
    else:
        tally.nonempty(metadata, f"{prefix}.metadata", key=f"{prefix}.metadata")
    ranks: set[int] = set()
    files: set[tuple[int, int]] = set()
    for entry in entries:
        match = _SHARD.match(entry.name)
        if match and not entry.is_dir:
            rank, thread = step_number(match.group(1)), step_number(match.group(2))
            if rank is None or thread is None:
                what = "rank" if rank is None else "writer-thread"
                tally.problem(f"shard {prefix}{entry.name} has a {what} number too long to be a {what}")
                continue
            ranks.add(rank)
            files.add((rank, thread))
            tally.nonempty(entry, f"shard {prefix}{entry.name}", key=f"{prefix}{entry.name}")
    tally.see_all(entries, prefix)
    if not ranks:
        tally.problem(f"no {prefix}__<rank>_<n>.distcp shards")
        return
    shown, missing = first_missing(ranks, max(ranks))
    if missing:
        listed = ", ".join(map(str, shown)) + (", …" if missing > len(shown) else "")
        tally.problem(f"{prefix}shards of rank(s) {listed} are missing ({missing} in all; "
                      f"ranks seen up to {max(ranks)})")
        return
    threads = max(t for _, t in files) + 1
    cells, absent = missing_cells(files, max(ranks) + 1, threads)
    if absent:
        listed = ", ".join(f"__{r}_{t}.distcp" for r, t in cells) + (", …" if absent > len(cells) else "")
        tally.problem(f"{prefix}writer-thread shard(s) {listed} are missing ({absent} in all; every rank writes "
                      f"{threads} file(s) __<rank>_0..{threads - 1}.distcp)")


def _validate_dcp_dir(fs: FileSystem, path: str, name: str, step: int, layout: str,
                      rule: StepRule | None) -> Checkpoint | None:
    tally = Tally()
    entries = listing(fs, path, tally, f"{name}/")  # None: refused or unreadable, reason recorded
    if not (entries is None or looks_like_dcp(entries) or (rule is not None and temp_reason(name))):
        return None  # a numbered directory without DCP files: not a checkpoint of this layout
    reason = temp_reason(name)
    if reason:
        tally.problem(reason)
    if entries is not None:
        check_dcp(fs, path, entries, tally)
    return tally.build(path=path, step=step, layout=layout, tag=name)


def _numbered(entries: list[Entry], rule: StepRule | None, limit: int) -> list[tuple[int, Entry]]:
    found: list[tuple[int, Entry]] = []
    for entry in entries:
        if not entry.is_dir:
            continue
        step = rule(entry.name) if rule is not None else step_from_name(entry.name)
        if step is not None:
            found.append((step, entry))
    found.sort(key=lambda item: (-item[0], item[1].name))
    return found[:limit]


def discover_dcp(fs: FileSystem, config: CheckpointConfig, layout: str = "dcp",
                 rule: StepRule | None = None, root: str | None = None) -> list[Checkpoint]:
    """Directories under the root whose name carries a step and that hold DCP files."""
    base = root or config.root
    found: list[Checkpoint] = []
    for step, entry in _numbered(fs.list_dir(base), rule, config.max_candidates):
        checkpoint = _validate_dcp_dir(fs, join(base, entry.name), entry.name, step, layout, rule)
        if checkpoint is not None:
            found.append(checkpoint)
    return found


def discover_torchtitan(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    """torchtitan saves `step-N/` DCP dirs in `<dump_folder>/checkpoint/`. Configured, the root may
    be either folder; auto-detection claims only a dump folder (plain `step-N/` dirs are `dcp`)."""
    inner = join(config.root, "checkpoint")
    stat = fs.stat(inner)
    if stat is not None and stat.is_dir:
        base = inner
    elif config.layout == "torchtitan":
        base = config.root
    else:
        return []
    return discover_dcp(fs, config, layout="torchtitan", rule=_torchtitan_step, root=base)


def discover_nemo(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    """NeMo checkpoints (`<name>--step=N-...`): a DCP dir (itself or its `weights/`), or a
    Lightning `.ckpt` file. NeMo creates `<checkpoint>-unfinished` before saving and removes it
    after, so that marker means the save did not finish."""
    entries = fs.list_dir(config.root)
    names = {e.name for e in entries}
    candidates: list[tuple[int, Entry]] = []
    for entry in entries:
        match = _NEMO.search(entry.name)
        step = step_number(match.group(1)) if match else None
        if (step is not None and not entry.name.endswith("-unfinished")
                and (entry.is_dir or entry.name.endswith(".ckpt"))):
            candidates.append((step, entry))
    candidates.sort(key=lambda item: (-item[0], item[1].name))
    if config.layout != "nemo" and not any(entry.is_dir for _, entry in candidates):
        return []  # only `.ckpt` files: Lightning's (NeMo 1 included), auto-detected as lightning
    found: list[Checkpoint] = []
    for step, entry in candidates[: config.max_candidates]:
        path = join(config.root, entry.name)
        tally = Tally()
        if f"{entry.name}-unfinished" in names:
            tally.problem(f"{entry.name}-unfinished exists: NeMo removes it when the save completes")
        if entry.is_dir:
            inner = listing(fs, path, tally, f"{entry.name}/")
            weights = by_name(inner or ()).get("weights")
            if weights is not None and weights.is_dir:
                in_weights = listing(fs, join(path, "weights"), tally, "weights/")
                if in_weights is not None:
                    check_dcp(fs, join(path, "weights"), in_weights, tally, where="weights")
            elif inner is not None:
                check_dcp(fs, path, inner, tally)
            tally.see_all(inner or [])
        elif tally.nonempty(entry, entry.name):
            verify_file(fs, path, entry, entry.name, tally)
        found.append(tally.build(path=path, step=step, layout="nemo", tag=entry.name))
    return found
