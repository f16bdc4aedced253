"""Megatron-LM (and NeMo 1 on Megatron) checkpoints: `iter_NNNNNNN/` dirs and the tracker file.

Megatron writes `latest_checkpointed_iteration.txt` (an iteration number, or `release`) only after
every rank finished saving, and loads whatever it names. So an `iter_` directory newer than the
tracker is a save that did not finish, and a tracker naming a missing directory is a broken
checkpoint. Inside an iteration: legacy `mp_rank_TT[_PPP]/` dirs (one per tensor/pipeline rank,
each with `model_optim_rng.pt`) or the distributed format (DCP shards, `common.pt`, `metadata.json`).
"""

from __future__ import annotations

import re

from goodput.checkpoints.dcp import check_dcp, looks_like_dcp
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, read_json, strip_temp, temp_reason

TRACKER = "latest_checkpointed_iteration.txt"
_ITER = re.compile(r"^iter_(\d+)$")
_MP_RANK = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?$")


def _check_legacy(fs: FileSystem, path: str, entries: list[Entry], tally: Tally) -> None:
    grid: set[tuple[int, int]] = set()
    for entry in entries:
        match = _MP_RANK.match(entry.name)
        if not match or not entry.is_dir:
            continue
        grid.add((int(match.group(1)), int(match.group(2) or 0)))
        inner = fs.list_dir(join(path, entry.name))
        weights = [e for e in inner if e.name.endswith(".pt") and not e.is_dir]
        if not weights:
            tally.problems.append(f"{entry.name}/ holds no .pt file")
        for item in weights:
            tally.nonempty(item, f"{entry.name}/{item.name}", key=f"{entry.name}/{item.name}")
        tally.see_all(inner, f"{entry.name}/")
    if not grid:
        tally.problems.append("no mp_rank_* directories and no distributed-checkpoint shards")
        return
    tp = max(t for t, _ in grid) + 1
    pp = max(p for _, p in grid) + 1
    missing = sorted({(t, p) for t in range(tp) for p in range(pp)} - grid)
    if missing:
        names = ", ".join(f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for t, p in missing[:8])
        tally.problems.append(f"model-parallel rank dir(s) missing: {names} (grid {tp} TP x {pp} PP)")


def _check_iteration(fs: FileSystem, path: str, tally: Tally) -> None:
    entries = fs.list_dir(path)
    if looks_like_dcp(entries):
        check_dcp(entries, tally)
        names = by_name(entries)
        if "metadata.json" in names:
            read_json(fs, join(path, "metadata.json"), "metadata.json", tally)
        if "common.pt" in names:
            tally.nonempty(names["common.pt"], "common.pt")
    else:
        _check_legacy(fs, path, entries, tally)
    tally.see_all(entries)


def _read_tracker(fs: FileSystem, root: str) -> tuple[int | None, bool, str | None]:
    """(iteration, is_release, None) from the tracker, or (None, False, why not)."""
    try:
        text = fs.read_small_text(join(root, TRACKER)).strip()
    except FileNotFoundError:
        return None, False, f"no {TRACKER}: Megatron writes it once a save completes"
    except ValueError as error:
        return None, False, f"{TRACKER} unreadable ({error})"
    if text == "release":
        return 0, True, None
    if text.isdigit():
        return int(text), False, None
    return None, False, f"{TRACKER} holds {text[:40]!r}, neither an iteration number nor 'release'"


def discover_megatron(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    root = config.root
    entries = fs.list_dir(root)
    names = by_name(entries)
    candidates: list[tuple[int, str]] = []
    for entry in entries:
        match = _ITER.match(strip_temp(entry.name))
        if entry.is_dir and match:
            candidates.append((int(match.group(1)), entry.name))
    if TRACKER not in names and not candidates:
        return []
    tracked, release, tracker_problem = _read_tracker(fs, root)
    tracked_name = "release" if release else f"iter_{tracked or 0:07d}"
    if not release:  # the directory the tracker names, however many digits its name has
        tracked_name = next((n for s, n in candidates if s == tracked and not temp_reason(n)), tracked_name)
    if tracked is not None and tracked_name not in {name for _, name in candidates}:
        candidates.append((tracked, tracked_name))
    candidates.sort(key=lambda item: (-item[0], item[1]))

    found: list[Checkpoint] = []
    for step, name in candidates[: config.max_candidates]:
        path = join(root, name)
        tally = Tally()
        reason = temp_reason(name)
        if reason:
            tally.problems.append(reason)
        if tracker_problem:
            tally.problems.append(tracker_problem)
        elif tracked is not None and step > tracked:
            tally.problems.append(f"newer than {TRACKER} ({tracked_name}): "
                                  "the save did not finish on every rank")
        stat = fs.stat(path)
        if stat is None or not stat.is_dir:
            tally.problems.append(f"{TRACKER} names {name}/, which does not exist")
        else:
            tally.see(stat, key=".")
            _check_iteration(fs, path, tally)
        pointer = tracked is not None and name == tracked_name
        found.append(tally.build(path=path, step=step, layout="megatron", tag=name, pointer=pointer))
    return found
