"""The configurable layout for everything else: a glob, a step regex and a completion marker.

Many training codes write `ckpt_<step>/` (or `ckpt_<step>.pt`) and touch a marker such as
`.complete` when done. With `CheckpointConfig(layout="generic", pattern=..., step_regex=...,
marker=...)` a job describes that convention as data instead of needing a plugin. Every file is
stat-ed (a few directory levels deep) and must be non-empty; none is opened.

The glob and the regex come from the job's comment, so both run on RE2 (linear time: `(a+)+$`
cannot backtrack; backreferences and lookaround do not compile) and the step is taken only from
ASCII digits of bounded length, whatever the regex captured (or did not: `(x)?`).
"""

from __future__ import annotations

from typing import Any

import re2

from goodput.checkpoints.fs import Entry, FileSystem, RefusedError, join
from goodput.checkpoints.metadata import step_number
from goodput.checkpoints.model import Checkpoint, CheckpointConfig
from goodput.checkpoints.scan import Tally, by_name, listing, temp_reason

MAX_DEPTH = 3
MAX_ENTRIES = 100_000
_TOO_MANY = f"more than {MAX_ENTRIES} files: stopped checking, so completeness is unknown"
# RE2's own memory budget per compiled pattern; a 256-character pattern needs far less.
_RE2_MAX_MEM = 1 << 20


class PatternError(RefusedError):
    """A job's glob or step regex that RE2 will not compile (or that is not a glob)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    return options


def _compile(pattern: str, what: str) -> Any:
    try:
        return re2.compile(pattern, _options())
    except re2.error as error:
        detail = error.args[0] if error.args else "invalid"
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        raise PatternError(f"{what} does not compile with RE2 (linear-time matching: no backreferences "
                           f"or lookaround): {text[:120]}") from None
    except (TypeError, ValueError, UnicodeError) as error:
        raise PatternError(f"{what} does not compile: {str(error)[:120]}") from None


def compile_step_regex(pattern: str) -> Any:
    """The job's step regex, compiled by RE2; PatternError when it does not compile."""
    return _compile(pattern, "the step regex")


def _class_member(ch: str) -> str:
    return ch if ch.isalnum() or ch == "-" or not ch.isascii() else "\\" + ch


def glob_to_re2(glob: str) -> str:
    """An fnmatch-style glob (`*`, `?`, `[seq]`, `[!seq]`) as an RE2 pattern for the whole name."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        i += 1
        if ch == "*":
            if not out or out[-1] != ".*":
                out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + (1 if i < n and glob[i] == "!" else 0)
            j += 1 if j < n and glob[j] == "]" else 0
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
                continue
            body = glob[i:j]
            negate = body.startswith("!")
            members = "".join(_class_member(c) for c in (body[1:] if negate else body))
            out.append(f"[{'^' if negate else ''}{members}]")
            i = j + 1
        else:
            out.append(ch if ch.isalnum() or not ch.isascii() else "\\" + ch)
    return "(?s)" + "".join(out)


def compile_glob(glob: str) -> Any:
    return _compile(glob_to_re2(glob), "the pattern")


def _step(regex: Any, name: str) -> int | None:
    match = regex.search(name)
    if match is None:
        return None
    digits = match.group(1) if regex.groups else match.group(0)
    return step_number(digits)


def _walk(fs: FileSystem, path: str, rel: str, depth: int, tally: Tally, marker: str | None,
          entries: list[Entry] | None = None) -> None:
    if entries is None:
        entries = listing(fs, path, tally, rel or ".") or []
    for entry in entries:
        if tally.files >= MAX_ENTRIES:
            if _TOO_MANY not in tally.problems:
                tally.problem(_TOO_MANY)
            return
        name = f"{rel}{entry.name}"
        if entry.is_dir:
            tally.see(entry, name)
            if depth < MAX_DEPTH:
                _walk(fs, join(path, entry.name), f"{name}/", depth + 1, tally, None)
        elif entry.name == marker and not rel and not entry.refused:
            tally.see(entry, name)  # markers are usually empty files
        else:
            tally.nonempty(entry, name, key=name)


def discover_generic(fs: FileSystem, config: CheckpointConfig) -> list[Checkpoint]:
    step_regex = compile_step_regex(config.step_regex)
    pattern = compile_glob(config.pattern)
    entries = fs.list_dir(config.root)
    names = by_name(entries)
    candidates: list[tuple[int, str]] = []
    for entry in entries:
        if config.marker and entry.name.endswith(config.marker) and entry.name != config.marker:
            continue  # the sibling marker of a file checkpoint
        if not pattern.fullmatch(entry.name):
            continue
        step = _step(step_regex, entry.name)
        if step is not None:
            candidates.append((step, entry.name))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    found: list[Checkpoint] = []
    for step, name in candidates[: config.max_candidates]:
        path = join(config.root, name)
        entry = names[name]
        tally = Tally()
        reason = temp_reason(name)
        if reason:
            tally.problem(reason)
        if entry.is_dir:
            tally.see(entry, ".")
            inside = listing(fs, path, tally, f"{name}/")
            marker = by_name(inside or ()).get(config.marker or "")
            if inside is not None and config.marker and marker is None:
                tally.problem(f"completion marker {config.marker} is missing")
            elif marker is not None and marker.refused:
                tally.problem(f"completion marker {config.marker}: {marker.refused}")
            _walk(fs, path, "", 1, tally, config.marker, inside or [])
        else:
            tally.nonempty(entry, name)
            if config.marker and f"{name}{config.marker}" not in names:
                tally.problem(f"completion marker {name}{config.marker} is missing")
        found.append(tally.build(path=path, step=step, layout="generic", tag=name))
    return found
