"""Megatron-LM (and NeMo 1 on Megatron) checkpoints: `iter_NNNNNNN/` dirs and the tracker file.

Megatron writes `latest_checkpointed_iteration.txt` (an iteration number, or `release`) only after
every rank finished saving, and loads whatever it names. So an `iter_` directory newer than the
tracker is a save that did not finish, and a tracker naming a missing directory is a broken
checkpoint. Inside an iteration: legacy `mp_rank_TT[_PPP]/` dirs (one per tensor/pipeline rank,
each with `model_optim_rng.pt`) or the distributed format (DCP shards, `common.pt`, `metadata.json`).
"""

from __future__ import annotations

import re2

from goodput.checkpoints.dcp import check_dcp, looks_like_dcp
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.metadata import MetadataError, parse_megatron_tracker, step_number
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import (
    Tally,
    Unread,
    by_name,
    listing,
    missing_cells,
    read_json,
    read_text,
    stat_dir,
    strip_temp,
    temp_reason,
)
from goodput.checkpoints.verify import verify_file

TRACKER = "latest_checkpointed_iteration.txt"
_ITER = re2.compile(r"^iter_([0-9]+)$")
_MP_RANK = re2.compile(r"^mp_rank_([0-9]+)(?:_([0-9]+))?$")


def _rank_dirs(entries: list[Entry], tally: Tally) -> list[tuple[int, int, Entry]]:
    ranks: list[tuple[int, int, Entry]] = []
    for entry in entries:
        match = _MP_RANK.match(entry.name)
        if not match or not entry.is_dir:
            continue
        tp, pp = step_number(match.group(1)), step_number(match.group(2) or "0")
        if tp is None or pp is None:
            tally.problem(f"{entry.name}/ has a rank number too long to be a rank")
            continue
        ranks.append((tp, pp, entry))
    return ranks


def _check_legacy(fs: FileSystem, path: str, entries: list[Entry], tally: Tally) -> None:
    grid: set[tuple[int, int]] = set()
    for tp, pp, entry in _rank_dirs(entries, tally):
        grid.add((tp, pp))
        inner = listing(fs, join(path, entry.name), tally, f"{entry.name}/")
        if inner is None:
            continue
        weights = [e for e in inner if e.name.endswith(".pt") and not e.is_dir]
        if not weights:
            tally.problem(f"{entry.name}/ holds no .pt file")
        for item in weights:
            what = f"{entry.name}/{item.name}"
            if tally.nonempty(item, what, key=what):
                verify_file(fs, join(path, what), item, what, tally)
        tally.see_all(inner, f"{entry.name}/")
    if not grid:
        tally.problem("no mp_rank_* directories and no distributed-checkpoint shards")
        return
    tp = max(t for t, _ in grid) + 1
    pp = max(p for _, p in grid) + 1
    shown, missing = missing_cells(grid, tp, pp)
    if missing:
        names = ", ".join(f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for t, p in shown)
        more = f", … ({missing} in all)" if missing > len(shown) else ""
        tally.problem(f"model-parallel rank dir(s) missing: {names}{more} (grid {tp} TP x {pp} PP)")


def _check_iteration(fs: FileSystem, path: str, name: str, tally: Tally) -> None:
    entries = listing(fs, path, tally, f"{name}/")
    if entries is None:
        return  # not listed: the reason is recorded
    if looks_like_dcp(entries):
        check_dcp(fs, path, entries, tally)
        names = by_name(entries)
        if "metadata.json" in names:
            read_json(fs, join(path, "metadata.json"), "metadata.json", tally)
        else:
            # megatron-core writes it last and refuses to load a distributed checkpoint without it.
            tally.problem("metadata.json is missing: megatron-core writes it last and cannot load the "
                          "checkpoint without it")
        if "common.pt" in names and tally.nonempty(names["common.pt"], "common.pt"):
            verify_file(fs, join(path, "common.pt"), names["common.pt"], "common.pt", tally)
    else:
        _check_legacy(fs, path, entries, tally)
    tally.see_all(entries)


def _read_tracker(fs: FileSystem, root: str) -> tuple[int | None, bool, str | None]:
    """(iteration, is_release, None) from the tracker, or (None, False, why not)."""
    text = read_text(fs, join(root, TRACKER), TRACKER)
    if isinstance(text, Unread):
        if text.missing:
            return None, False, f"no {TRACKER}: Megatron writes it once a save completes"
        return None, False, text.reason
    try:
        tracker = parse_megatron_tracker(text)
    except MetadataError as error:
        return None, False, f"{TRACKER} {error}"
    return tracker.iteration, tracker.release, None


def _iteration_step(name: str) -> int | None:
    match = _ITER.match(strip_temp(name))
    return step_number(match.group(1)) if match else None


def discover_megatron(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    root = config.root
    entries = fs.list_dir(root)
    names = by_name(entries)
    candidates: list[tuple[int, str]] = []
    for entry in entries:
        step = _iteration_step(entry.name)
        if entry.is_dir and step is not None:
            candidates.append((step, entry.name))
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
            tally.problem(reason)
        if tracker_problem:
            tally.problem(tracker_problem)
        elif tracked is not None and step > tracked:
            tally.problem(f"newer than {TRACKER} ({tracked_name}): the save did not finish on every rank")
        stat = stat_dir(fs, path, f"{name}/", missing=f"{TRACKER} names {name}/, which does not exist")
        if isinstance(stat, str):
            tally.problem(stat)
        else:
            tally.see(stat, key=".")
            _check_iteration(fs, path, name, tally)
        pointer = tracked is not None and name == tracked_name
        found.append(tally.build(path=path, step=step, layout="megatron", tag=name, pointer=pointer))
    return found
