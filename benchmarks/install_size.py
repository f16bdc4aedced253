"""`python -m benchmarks install-size [--json]`: what each install of goodput puts on disk.

The claim "a lean install" is a number: the bytes of every distribution this checkout's
pyproject.toml pulls in with a given set of extras, walked through the installed packages' own
metadata (`importlib.metadata`, their RECORD files), so it measures the environment it runs in
and needs no download. Packages outside the closure (test tools) and goodput's own code (about
the same in every install) are not counted.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks._harness import emit

INSTALLS: dict[str, tuple[str, ...]] = {
    "lean: no extras (CLI/REST backends, console)": (),
    "the image: ssh, nvsentinel, otlp": ("ssh", "nvsentinel", "otlp"),
    "all runtime: + embedded dev server": ("ssh", "nvsentinel", "otlp", "embedded"),
    "before the extras (every package required)": ("ssh", "nvsentinel", "otlp", "embedded", "bench"),
}
ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution) -> list[str]:
    """Names `dist` requires, its own extras off; other markers (platform, python) are taken as true."""
    names = []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        if _EXTRA_MARKER.search(marker):
            continue
        names.append(_spec_name(spec))
    return names


def closure(extras: Sequence[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution this checkout's pyproject.toml pulls in with `extras` on."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += [s for s in project["optional-dependencies"][extra] if not s.startswith("goodput[")]
    seen: dict[str, metadata.Distribution] = {}
    pending = [_spec_name(s) for s in specs]
    while pending:
        name = pending.pop()
        key = _canonical(name)
        if key in seen:
            continue
        try:
            seen[key] = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        pending += _requirements(seen[key])
    return seen


def _spec_name(spec: str) -> str:
    head = _NAME.match(spec.strip())
    return head.group(0) if head else spec


def size_of(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def measure() -> dict[str, Any]:
    rows = {}
    for label, extras in INSTALLS.items():
        dists = closure(extras)
        sizes = {name: size_of(d) for name, d in dists.items()}
        rows[label] = {"extras": list(extras), "mib": round(sum(sizes.values()) / 2**20, 1),
                       "distributions": len(sizes),
                       "largest": sorted(((round(s / 2**20, 1), n) for n, s in sizes.items()), reverse=True)[:6]}
    return rows


def run(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks install-size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure()
    for label, row in rows.items():
        largest = ", ".join(f"{n} {m}" for m, n in row["largest"])
        print(f"  {label:<46} {row['mib']:>7.1f} MiB in {row['distributions']:>3} distributions  ({largest})")
    emit({"benchmark": "install-size", "installs": rows}, args.json)
