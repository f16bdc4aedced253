"""`python -m benchmarks install-size [--json]`: what each install of goodput puts on disk.

The claim "a lean install" is a number: the bytes of every distribution pulled in by goodput's
requirements with a given set of extras, walked through the installed packages' own metadata
(`importlib.metadata`, their RECORD files), so it measures the environment it runs in and needs no
download. Packages outside the closure (test tools) are not counted; goodput's own code is.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks._harness import emit
from goodput.extras import EXTRAS

INSTALLS: dict[str, tuple[str, ...]] = {
    "lean (CLI backend, REST, console)": (),
    "image default (+ nvsentinel)": ("nvsentinel",),
    "+ ssh": ("nvsentinel", "ssh"),
    "all runtime (+ devserver)": tuple(EXTRAS),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution, extras: Iterable[str]) -> list[str]:
    """Names `dist` requires with `extras` on; other markers (platform, python) are taken as true."""
    wanted, names = set(extras), []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found and found.group(1) not in wanted:
            continue
        head = _NAME.match(spec.strip())
        if head:
            names.append(head.group(0))
            if "[" in spec:  # "goodput[ssh]" style self-references carry their own extras
                names += [f"{head.group(0)}[{x.strip()}]" for x in spec.split("[", 1)[1].split("]")[0].split(",")]
    return names


def closure(root: str, extras: Sequence[str]) -> dict[str, metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, tuple[str, ...]]] = [(root, tuple(extras))]
    while pending:
        name, with_extras = pending.pop()
        base = name.split("[", 1)[0]
        try:
            dist = metadata.distribution(base)
        except metadata.PackageNotFoundError:
            continue
        key = _canonical(base)
        extra_here = with_extras + (tuple(name.split("[", 1)[1].rstrip("]").split(",")) if "[" in name else ())
        if key in seen and not extra_here:
            continue
        seen[key] = dist
        pending += [(n, ()) for n in _requirements(dist, extra_here)]
    return seen


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
        dists = closure("goodput", extras)
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
        print(f"  {label:<36} {row['mib']:>7.1f} MiB in {row['distributions']:>3} distributions  ({largest})")
    emit({"benchmark": "install-size", "installs": rows}, args.json)
