"""DeepSpeed checkpoints: a `latest` tag file naming a `global_stepN/` directory.

DeepSpeed saves `mp_rank_XX_model_states.pt` (per model-parallel rank) and, under ZeRO, one
`*_optim_states.pt` per data-parallel rank, then writes `latest` with the tag. A tag directory
newer than `latest` is a save that did not finish; `latest` naming a missing directory is broken.
Optimizer shards are required when the run uses ZeRO at all (any of its checkpoints has them),
because without ZeRO the optimizer lives in the model-states file.
"""

from __future__ import annotations

import re

from goodput.checkpoints.fs import Entry, FileSystem, join
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, step_from_name, temp_reason

LATEST = "latest"
_DP_RANK = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")


def _is_model(entry: Entry) -> bool:
    return not entry.is_dir and entry.name.endswith("_model_states.pt")


def _is_optim(entry: Entry) -> bool:
    return not entry.is_dir and entry.name.endswith("_optim_states.pt")


def check_tag_dir(entries: list[Entry], tally: Tally, zero: bool, where: str = "") -> None:
    """Validates one `global_stepN/` listing (`where`: its path inside the checkpoint, if nested)."""
    prefix = f"{where}/" if where else ""
    models = [e for e in entries if _is_model(e)]
    optims = [e for e in entries if _is_optim(e)]
    if not models:
        tally.problems.append("no *_model_states.pt file")
    for entry in models + optims:
        tally.nonempty(entry, f"{prefix}{entry.name}", key=f"{prefix}{entry.name}")
    tally.see_all(entries, prefix)
    if zero and not optims:
        tally.problems.append("no *_optim_states.pt file, though this run's other checkpoints have them")
    per_mp: dict[int, set[int]] = {}
    for entry in optims:
        match = _DP_RANK.search(entry.name)
        if match:
            per_mp.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    for mp, ranks in sorted(per_mp.items()):
        missing = sorted(set(range(max(ranks) + 1)) - ranks)
        if missing:
            tally.problems.append(f"optimizer shards of data-parallel rank(s) {missing[:8]} missing "
                                  f"for mp_rank_{mp:02d}")


def _read_latest(fs: FileSystem, root: str) -> tuple[str | None, str | None]:
    try:
        tag = fs.read_small_text(join(root, LATEST)).strip()
    except FileNotFoundError:
        return None, None
    except ValueError as error:
        return None, f"`latest` unreadable ({error})"
    if not tag or "/" in tag or "\n" in tag:
        return None, f"`latest` holds {tag[:40]!r}, not a tag name"
    return tag, None


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

    listings = {name: fs.list_dir(join(root, name)) for _, name in candidates}
    zero = any(_is_optim(e) for listing in listings.values() for e in listing)
    recognised = any(_is_model(e) or _is_optim(e) for listing in listings.values() for e in listing)
    if tag is None and latest_problem is None and not recognised and config.layout != "deepspeed":
        return []  # numbered dirs without DeepSpeed files or `latest`: some other layout's
    found: list[Checkpoint] = []
    for step, name in candidates:
        path = join(root, name)
        tally = Tally()
        reason = temp_reason(name)
        if reason:
            tally.problems.append(reason)
        if latest_problem:
            tally.problems.append(latest_problem)
        elif tag_step is not None and step > tag_step:
            tally.problems.append(f"newer than `latest` ({tag}): the save did not finish")
        stat = fs.stat(path)
        if stat is None or not stat.is_dir:
            tally.problems.append(f"`latest` names {name}/, which does not exist")
        else:
            tally.see(stat, key=".")
            check_tag_dir(listings[name], tally, zero)
        found.append(tally.build(path=path, step=step, layout="deepspeed", tag=name, pointer=name == tag))
    return found
