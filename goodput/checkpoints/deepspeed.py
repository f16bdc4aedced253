"""DeepSpeed checkpoints: a `latest` tag file naming a `global_stepN/` directory.

DeepSpeed saves `mp_rank_XX_model_states.pt` (per model-parallel rank) and, under ZeRO, one
`*_optim_states.pt` per data-parallel rank, then writes `latest` with the tag. A tag directory
newer than `latest` is a save that did not finish; `latest` naming a missing directory is broken.
Optimizer shards are required when the run uses ZeRO at all (any of its checkpoints has them),
because without ZeRO the optimizer lives in the model-states file. How many there must be is in
the model-states file itself (`dp_world_size`, read from its `data.pkl` as data, never
unpickled): a save whose last data-parallel ranks never wrote is otherwise indistinguishable from
a smaller job. Every `.pt` must also end with its zip end records (goodput.checkpoints.verify).
"""

from __future__ import annotations

import re2

from goodput.checkpoints.formats import ZipDirectory
from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.metadata import MetadataError, parse_deepspeed_latest, step_number
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import (
    Tally,
    Unread,
    first_missing,
    listing,
    read_text,
    stat_dir,
    step_from_name,
    temp_reason,
)
from goodput.checkpoints.verify import torch_file_fields, verify_file

LATEST = "latest"
_DP_RANK = re2.compile(r"zero_pp_rank_([0-9]+)_mp_rank_([0-9]+)_(optim|model)_states\.pt$")
MAX_DP_WORLD = 1 << 20
SHOWN_MISSING = 8


def _is_model(entry: Entry) -> bool:
    return not entry.is_dir and entry.name.endswith("_model_states.pt")


def _is_optim(entry: Entry) -> bool:
    return not entry.is_dir and entry.name.endswith("_optim_states.pt")


def _dp_ranks(files: list[Entry], tally: Tally) -> dict[int, set[int]]:
    per_mp: dict[int, set[int]] = {}
    for entry in files:
        match = _DP_RANK.search(entry.name)
        if not match:
            continue
        dp, mp = step_number(match.group(1)), step_number(match.group(2))
        if dp is None or mp is None:
            tally.problem(f"{entry.name} has a rank number too long to be a rank")
            continue
        per_mp.setdefault(mp, set()).add(dp)
    return per_mp


def _dp_world_size(fs: FileSystem, directory: str, models: list[Entry], zips: dict[str, ZipDirectory],
                   tally: Tally, prefix: str) -> int | None:
    """The data-parallel world size DeepSpeed recorded in the first model-states file, or None
    (also when that file is no whole zip: `verify_file` already said why)."""
    usable = [e for e in models if e.size and not e.refused]
    if not usable:
        return None
    first = min(usable, key=lambda e: e.name)
    where = zips.get(first.name)
    if where is None:
        return None
    fields = torch_file_fields(fs, join(directory, first.name), where, f"{prefix}{first.name}", tally)
    size = (fields or {}).get("dp_world_size")
    if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= MAX_DP_WORLD:
        return size
    return None


def _check_ranks(kind: str, per_mp: dict[int, set[int]], world: int | None, tally: Tally) -> None:
    for mp, ranks in sorted(per_mp.items())[:SHOWN_MISSING]:
        highest = max(max(ranks), world - 1) if world else max(ranks)
        shown, missing = first_missing(ranks, highest)
        if missing:
            more = f" ({missing} in all)" if missing > len(shown) else ""
            recorded = f"; the model states record {world} data-parallel ranks" if world else ""
            tally.problem(f"{kind} shards of data-parallel rank(s) {shown} missing{more} for mp_rank_{mp:02d}"
                          f"{recorded}")


def check_tag_dir(fs: FileSystem, directory: str, entries: list[Entry], tally: Tally, zero: bool,
                  where: str = "") -> None:
    """Validates one `global_stepN/` directory (`where`: its path inside the checkpoint, if nested)."""
    prefix = f"{where}/" if where else ""
    models = [e for e in entries if _is_model(e)]
    optims = [e for e in entries if _is_optim(e)]
    if not models:
        tally.problem("no *_model_states.pt file")
    zips: dict[str, ZipDirectory] = {}
    for entry in models + optims:
        if tally.nonempty(entry, f"{prefix}{entry.name}", key=f"{prefix}{entry.name}"):
            found = verify_file(fs, join(directory, entry.name), entry, f"{prefix}{entry.name}", tally)
            if found is not None:
                zips[entry.name] = found
    tally.see_all(entries, prefix)
    if zero and not optims:
        tally.problem("no *_optim_states.pt file, though this run's other checkpoints have them")
    world = _dp_world_size(fs, directory, models, zips, tally, prefix) if optims else None
    _check_ranks("optimizer", _dp_ranks(optims, tally), world, tally)
    _check_ranks("model-state", _dp_ranks([e for e in models if e.name.startswith("zero_pp_rank_")], tally),
                 world, tally)


def _read_latest(fs: FileSystem, root: str) -> tuple[str | None, str | None]:
    text = read_text(fs, join(root, LATEST), "`latest`")
    if isinstance(text, Unread):
        return None, None if text.missing else text.reason
    try:
        return parse_deepspeed_latest(text), None
    except MetadataError as error:
        return None, f"`latest` {error}"


def discover_deepspeed(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    root = config.root
    entries = fs.list_dir(root)
    tag, latest_problem = _read_latest(fs, root)
    candidates: list[tuple[int, str]] = []
    for entry in entries:
        step = step_from_name(entry.name)
        if entry.is_dir and step is not None and ("global_step" in entry.name or entry.name == tag):
            candidates.append((step, entry.name))
    if tag is None and latest_problem is None and not candidates:
        return []
    tag_step = step_from_name(tag) if tag else None
    if tag is not None and tag not in {name for _, name in candidates}:
        candidates.append((tag_step or 0, tag))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    candidates = candidates[: config.max_candidates]

    tallies = {name: Tally() for _, name in candidates}
    stats = {name: stat_dir(fs, join(root, name), f"{name}/", missing=f"`latest` names {name}/, which does not exist")
             for _, name in candidates}
    listings = {name: listing(fs, join(root, name), tallies[name], f"{name}/") if isinstance(stats[name], Entry)
                else None for _, name in candidates}
    zero = any(_is_optim(e) for listing_ in listings.values() for e in listing_ or ())
    recognised = any(_is_model(e) or _is_optim(e) for listing_ in listings.values() for e in listing_ or ())
    if tag is None and latest_problem is None and not recognised and config.layout != "deepspeed":
        return []  # numbered dirs without DeepSpeed files or `latest`: some other layout's
    found: list[Checkpoint] = []
    for step, name in candidates:
        path = join(root, name)
        tally = tallies[name]
        reason = temp_reason(name)
        if reason:
            tally.problem(reason)
        if latest_problem:
            tally.problem(latest_problem)
        elif tag_step is not None and step > tag_step:
            tally.problem(f"newer than `latest` ({tag}): the save did not finish")
        stat, entries_ = stats[name], listings[name]
        if isinstance(stat, str):
            tally.problem(stat)
        elif entries_ is not None:
            tally.see(stat, key=".")
            check_tag_dir(fs, path, entries_, tally, zero)
        found.append(tally.build(path=path, step=step, layout="deepspeed", tag=name, pointer=name == tag))
    return found
