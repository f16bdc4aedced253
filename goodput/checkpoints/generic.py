"""The configurable layout for everything else: a glob, a step regex and a completion marker.

Many training codes write `ckpt_<step>/` (or `ckpt_<step>.pt`) and touch a marker such as
`.complete` when done. With `CheckpointConfig(layout="generic", pattern=..., step_regex=...,
marker=...)` a job describes that convention as data instead of needing a plugin. Every file is
stat-ed (a few directory levels deep) and must be non-empty; none is opened.
"""

from __future__ import annotations

import fnmatch
import re

from goodput.checkpoints.fs import FileSystem, join
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, temp_reason

MAX_DEPTH = 3
MAX_ENTRIES = 100_000
_TOO_MANY = f"more than {MAX_ENTRIES} files: stopped checking, so completeness is unknown"


def _walk(fs: FileSystem, path: str, rel: str, depth: int, tally: Tally, marker: str | None) -> None:
    for entry in fs.list_dir(path):
        if tally.files >= MAX_ENTRIES:
            if _TOO_MANY not in tally.problems:
                tally.problems.append(_TOO_MANY)
            return
        name = f"{rel}{entry.name}"
        if entry.is_dir:
            tally.see(entry, name)
            if depth < MAX_DEPTH:
                _walk(fs, join(path, entry.name), f"{name}/", depth + 1, tally, None)
        elif entry.name == marker and not rel:
            tally.see(entry, name)  # markers are usually empty files
        else:
            tally.nonempty(entry, name, key=name)


def discover_generic(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    step_regex = re.compile(config.step_regex)
    entries = fs.list_dir(config.root)
    names = by_name(entries)
    candidates: list[tuple[int, str]] = []
    for entry in entries:
        if config.marker and entry.name.endswith(config.marker) and entry.name != config.marker:
            continue  # the sibling marker of a file checkpoint
        if not fnmatch.fnmatchcase(entry.name, config.pattern):
            continue
        match = step_regex.search(entry.name)
        if match and (match.group(1) if match.groups() else match.group(0)).isdigit():
            candidates.append((int(match.group(1) if match.groups() else match.group(0)), entry.name))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    found: list[Checkpoint] = []
    for step, name in candidates[: config.max_candidates]:
        path = join(config.root, name)
        entry = names[name]
        tally = Tally()
        reason = temp_reason(name)
        if reason:
            tally.problems.append(reason)
        if entry.is_dir:
            tally.see(entry, ".")
            if config.marker and fs.stat(join(path, config.marker)) is None:
                tally.problems.append(f"completion marker {config.marker} is missing")
            _walk(fs, path, "", 1, tally, config.marker)
        else:
            tally.nonempty(entry, name)
            if config.marker and f"{name}{config.marker}" not in names:
                tally.problems.append(f"completion marker {name}{config.marker} is missing")
        found.append(tally.build(path=path, step=step, layout="generic", tag=name))
    return found
