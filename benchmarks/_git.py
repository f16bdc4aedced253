"""The commit a measurement was taken on, for every result that names one (benchmarks, fuzz tallies).

A figure is only worth quoting with the code it measured; one function says what "the commit" means
so that the result files cannot disagree about it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def commit(*paths: str, untracked: bool = False) -> str:
    """HEAD's 12-digit short hash, `+dirty` when the tree (only `paths`, if given) has uncommitted
    changes, untracked files counting when `untracked`; "unknown" outside a git checkout."""
    status = ["git", "status", "--porcelain", f"--untracked-files={'all' if untracked else 'no'}"]
    if paths:
        status += ["--", *paths]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=_ROOT, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(status, cwd=_ROOT, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
