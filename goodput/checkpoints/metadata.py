"""Parsers for the few small files discovery reads: pointer files and JSON metadata.

Their bytes are the job owner's, so each parser bounds what it accepts before doing work:
integers only from ASCII digits and at most `MAX_STEP_DIGITS` of them (`str.isdigit()` is True for
`²`, which int() rejects; 5,000 digits make int() raise), JSON only after its nesting depth and
container count are checked (json.loads recurses: 100,000 `[` raise RecursionError), and never
more text in a message than a short, printable excerpt. Each parser returns a value or raises
`MetadataError` with a message; nothing else escapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import re2

from goodput.checkpoints.model import MAX_STEP_DIGITS

MAX_JSON_DEPTH = 64
# A trainer_state.json of a long run has one small dict per logged step; 8 MiB hold ~100k.
MAX_JSON_CONTAINERS = 250_000
MAX_JSON_INT_DIGITS = 40
EXCERPT_CHARS = 40
MAX_TAG_CHARS = 255
MAX_INDEX_SHARDS = 100_000

_ASCII_DIGITS = frozenset("0123456789")
# A JSON string literal (escapes included), removed before brackets are counted.
_JSON_STRING = re2.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re2.compile(r"[^\[\]{}]+")
_OPENING = frozenset(b"[{")


class MetadataError(ValueError):
    """A pointer or metadata file's content is not what its framework writes."""


@dataclass(frozen=True, slots=True)
class Tracker:
    """Megatron's `latest_checkpointed_iteration.txt`: an iteration, or `release` (step 0)."""

    iteration: int
    release: bool = False


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A short, printable, quoted excerpt of untrusted text for a problem message."""
    cut = text[:limit]
    shown = "".join(ch if ch.isprintable() and ch.isascii() else "?" for ch in cut)
    return repr(shown) + ("…" if len(text) > limit else "")


def is_ascii_digits(text: str) -> bool:
    return bool(text) and all(ch in _ASCII_DIGITS for ch in text)


def step_number(text: str | None) -> int | None:
    """`text` as a step number when it is 1..MAX_STEP_DIGITS ASCII digits, else None."""
    if text is None or not 0 < len(text) <= MAX_STEP_DIGITS or not is_ascii_digits(text):
        return None
    return int(text)


def parse_megatron_tracker(text: str) -> Tracker:
    """`latest_checkpointed_iteration.txt`: ASCII digits or `release`, surrounding whitespace ignored."""
    stripped = text.strip()
    if stripped == "release":
        return Tracker(iteration=0, release=True)
    iteration = step_number(stripped)
    if iteration is not None:
        return Tracker(iteration=iteration)
    if is_ascii_digits(stripped):
        raise MetadataError(f"holds an iteration number of {len(stripped)} digits (at most {MAX_STEP_DIGITS})")
    raise MetadataError(f"holds {excerpt(stripped)}, neither an iteration number nor 'release'")


def parse_deepspeed_latest(text: str) -> str:
    """DeepSpeed's `latest`: one tag naming a directory next to it (no path, no control characters)."""
    tag = text.strip()
    if (not tag or len(tag) > MAX_TAG_CHARS or "/" in tag or tag in {".", ".."}
            or not all(ch.isprintable() for ch in tag)):
        raise MetadataError(f"holds {excerpt(tag)}, not a tag name")
    return tag


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise MetadataError(f"does not parse as JSON (an integer of {len(text)} digits)")
    return int(text)


def check_json_shape(text: str) -> None:
    """MetadataError when `text` nests deeper than MAX_JSON_DEPTH or holds too many containers;
    linear time, before json.loads (which recurses once per level)."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot reach RE2
    brackets = _BRACKETS.sub("", _JSON_STRING.sub("", text))
    if len(brackets) > 2 * MAX_JSON_CONTAINERS:
        raise MetadataError(f"holds more than {MAX_JSON_CONTAINERS} JSON arrays and objects; not parsed")
    depth = max(accumulate(1 if b in _OPENING else -1 for b in brackets.encode("ascii")), default=0)
    if depth > MAX_JSON_DEPTH:
        raise MetadataError(f"nests JSON deeper than {MAX_JSON_DEPTH} levels; not parsed")


def parse_json(text: str) -> Any:
    """Bounded JSON: shape checked first, integers of at most MAX_JSON_INT_DIGITS digits."""
    check_json_shape(text)
    try:
        return json.loads(text, parse_int=_bounded_int)
    except MetadataError:
        raise
    except ValueError as error:  # JSONDecodeError, and int/float conversions json makes itself
        raise MetadataError(f"does not parse as JSON ({str(error)[:120]})") from None


def parse_trainer_state(text: str) -> int:
    """The integer `global_step` of an HF Trainer `trainer_state.json`."""
    return trainer_state_step(parse_json(text))


def trainer_state_step(state: Any) -> int:
    step = state.get("global_step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 10**MAX_STEP_DIGITS:
        raise MetadataError("has no integer global_step")
    return step


def parse_weight_map(text: str) -> tuple[str, ...]:
    """The shard file names a `*.index.json` lists (values of its `weight_map`), sorted, unique."""
    return weight_map_shards(parse_json(text))


def weight_map_shards(data: Any) -> tuple[str, ...]:
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise MetadataError("has no weight_map")
    values = list(weight_map.values())
    if not all(isinstance(s, str) and 0 < len(s) <= MAX_TAG_CHARS for s in values):
        raise MetadataError("has a weight_map value that is not a file name")
    shards = set(values)
    if len(shards) > MAX_INDEX_SHARDS:
        raise MetadataError(f"lists more than {MAX_INDEX_SHARDS} shard files")
    return tuple(sorted(shards))
