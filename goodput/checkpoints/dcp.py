"""PyTorch Distributed Checkpoint (DCP) directories, and the layouts built on them.

torch.distributed.checkpoint writes one `__<rank>_<n>.distcp` file per rank (and writer thread)
and the coordinator writes `.metadata` last, so `.metadata` is the commit marker: shards without
it are a save that never finished. `.metadata` is a pickle and is never read (only its size);
the shard set is checked for empty files and gaps in the rank numbers. torchtitan (`step-N/`
under the dump folder's `checkpoint/`) and NeMo 2 (`...step=N.../weights/`) are DCP underneath.
"""

from __future__ import annotations

import re

from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, step_from_name, strip_temp, temp_reason

_SHARD = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_TORCHTITAN = re.compile(r"^step-(\d+)$")
_NEMO = re.compile(r"step=(\d+)")


def looks_like_dcp(entries: list[Entry]) -> bool:
    return any(e.name == ".metadata" or _SHARD.match(e.name) for e in entries if not e.is_dir)


def check_dcp(entries: list[Entry], tally: Tally, where: str = "") -> None:
    """Validates one DCP directory's listing: `.metadata` present and non-empty, shards non-empty,
    rank numbers 0..R-1 without gaps."""
    names = by_name(entries)
    prefix = f"{where}/" if where else ""
    metadata = names.get(".metadata")
    if metadata is None:
        tally.problems.append(f"{prefix}.metadata is missing: DCP writes it last, so this save did not finish")
    else:
        tally.nonempty(metadata, f"{prefix}.metadata", key=f"{prefix}.metadata")
    ranks: set[int] = set()
    for entry in entries:
        match = _SHARD.match(entry.name)
        if match and not entry.is_dir:
            ranks.add(int(match.group(1)))
            tally.nonempty(entry, f"shard {prefix}{entry.name}", key=f"{prefix}{entry.name}")
    tally.see_all(entries, prefix)
    if not ranks:
        tally.problems.append(f"no {prefix}__<rank>_<n>.distcp shards")
        return
    missing = sorted(set(range(max(ranks) + 1)) - ranks)
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", …" if len(missing) > 8 else "")
        tally.problems.append(f"{prefix}shards of rank(s) {shown} are missing (ranks seen up to {max(ranks)})")


def _validate_dcp_dir(path: str, name: str, step: int, layout: str,
                      entries: list[Entry]) -> Checkpoint:
    tally = Tally()
    reason = temp_reason(name)
    if reason:
        tally.problems.append(reason)
    check_dcp(entries, tally)
    return tally.build(path=path, step=step, layout=layout, tag=name)


def _numbered(entries: list[Entry], pattern: re.Pattern[str] | None, limit: int) -> list[tuple[int, Entry]]:
    found: list[tuple[int, Entry]] = []
    for entry in entries:
        if not entry.is_dir:
            continue
        if pattern is not None:
            match = pattern.match(strip_temp(entry.name))
            step = int(match.group(1)) if match else None
        else:
            step = step_from_name(entry.name)
        if step is not None:
            found.append((step, entry))
    found.sort(key=lambda item: (-item[0], item[1].name))
    return found[:limit]


def discover_dcp(fs: FileSystem, config: CheckpointConfig, layout: str = "dcp",
                 pattern: re.Pattern[str] | None = None, root: str | None = None) -> list[Checkpoint]:
    """Directories under the root whose name carries a step and that hold DCP files."""
    base = root or config.root
    found: list[Checkpoint] = []
    for step, entry in _numbered(fs.list_dir(base), pattern, config.max_candidates):
        path = join(base, entry.name)
        entries = fs.list_dir(path)
        if looks_like_dcp(entries) or (pattern is not None and temp_reason(entry.name)):
            found.append(_validate_dcp_dir(path, entry.name, step, layout, entries))
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
    return discover_dcp(fs, config, layout="torchtitan", pattern=_TORCHTITAN, root=base)


def discover_nemo(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    """NeMo checkpoints (`<name>--step=N-...`): a DCP dir (itself or its `weights/`), or a
    Lightning `.ckpt` file. NeMo creates `<checkpoint>-unfinished` before saving and removes it
    after, so that marker means the save did not finish."""
    entries = fs.list_dir(config.root)
    names = {e.name for e in entries}
    candidates: list[tuple[int, Entry]] = []
    for entry in entries:
        match = _NEMO.search(entry.name)
        if match and not entry.name.endswith("-unfinished") and (entry.is_dir or entry.name.endswith(".ckpt")):
            candidates.append((int(match.group(1)), entry))
    candidates.sort(key=lambda item: (-item[0], item[1].name))
    found: list[Checkpoint] = []
    for step, entry in candidates[: config.max_candidates]:
        path = join(config.root, entry.name)
        tally = Tally()
        if f"{entry.name}-unfinished" in names:
            tally.problems.append(f"{entry.name}-unfinished exists: NeMo removes it when the save completes")
        if entry.is_dir:
            inner = fs.list_dir(path)
            weights = by_name(inner).get("weights")
            if weights is not None and weights.is_dir:
                check_dcp(fs.list_dir(join(path, "weights")), tally, where="weights")
            else:
                check_dcp(inner, tally)
            tally.see_all(inner)
        else:
            tally.nonempty(entry, entry.name)
        found.append(tally.build(path=path, step=step, layout="nemo", tag=entry.name))
    return found
