"""What every hostile-input suite asserts, in one place: a parser returns, or rejects cleanly.

A parser of job-controlled bytes may answer or raise one of its documented, typed errors with a
message; anything else escaping (IndexError, RecursionError, a pydantic ValidationError it
forgot to wrap) is a crash a Slurm user can trigger, and fails the example. Each call is
counted and timed per target; `make fuzz` writes the tallies that docs/security.md quotes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from benchmarks._git import commit

T = TypeVar("T")

REPORT_ENV = "GOODPUT_FUZZ_REPORT"


@dataclass
class Tally:
    examples: int = 0
    rejected: int = 0
    slowest_s: float = 0.0


TALLIES: dict[str, Tally] = {}


def rejects_cleanly(target: str, call: Callable[[], T],
                    allowed: tuple[type[BaseException], ...]) -> T | None:
    """`call()`'s result, or None when it raised one of `allowed` with a non-empty message."""
    tally = TALLIES.setdefault(target, Tally())
    started = time.perf_counter()
    try:
        return call()
    except allowed as error:
        tally.rejected += 1
        assert str(error).strip(), f"{target}: {type(error).__name__} raised without a message"
        return None
    finally:
        tally.examples += 1
        tally.slowest_s = max(tally.slowest_s, time.perf_counter() - started)


def write_report() -> None:
    """The tallies as JSON where GOODPUT_FUZZ_REPORT points (merged with what is there)."""
    path = os.environ.get(REPORT_ENV)
    if not path or not TALLIES:
        return
    target = Path(path)
    existing = json.loads(target.read_text()) if target.exists() else {}
    targets = existing.setdefault("targets", {})
    for name, tally in sorted(TALLIES.items()):
        targets[name] = {"examples": tally.examples, "rejected": tally.rejected,
                         "slowest_s": round(tally.slowest_s, 4)}
    existing["commit"] = commit()
    existing["profile"] = os.environ.get("GOODPUT_FUZZ_PROFILE", "suite")
    target.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
