"""Loading the catalogue from the TOML files shipped inside the package.

The rules are data so that they can be reviewed, versioned and extended without touching the
matcher. Shared regex pieces (`{xid}`, `{hostname}`) are written once in `catalogue.toml` and
expanded here; a reference to an unknown fragment or a duplicate id is a load error. NVIDIA's Xid
catalogue and the other vendors' code tables (`data/vendor/`: CUDA's, NVML's, libibverbs', EFA's,
Slurm's, MPI's and the system's codes) are tables, not rules: `vendor` and the modules
`code_tables` lists turn them into signatures here.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any

from goodput.diagnose.signatures import code_tables
from goodput.diagnose.signatures.model import Signature
from goodput.diagnose.signatures.vendor import TABLE_FILE, load_table, signature_entries

_DATA_PACKAGE = "goodput.diagnose.signatures"
_META_FILE = "catalogue.toml"
# `{name}` with a lower-case name; regex quantifiers (`{2}`, `{1,3}`) never look like that.
_FRAGMENT_REF = re.compile(r"\{([a-z_]+)\}")


class CatalogueError(ValueError):
    """The catalogue data is inconsistent; raised at load time, never while matching."""


def expand(pattern: str, fragments: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in fragments:
            raise CatalogueError(f"unknown fragment {{{name}}} in pattern {pattern[:80]!r}")
        return fragments[name]

    return _FRAGMENT_REF.sub(sub, pattern)


def parse(meta: Mapping[str, Any], families: Iterable[tuple[str, Mapping[str, Any]]]
          ) -> tuple[int, tuple[Signature, ...]]:
    """Validate and expand raw TOML documents into signatures, in file then entry order."""
    version = meta.get("version")
    if not isinstance(version, int) or version < 1:
        raise CatalogueError("catalogue.toml must set an integer version >= 1")
    fragments = {str(k): str(v) for k, v in dict(meta.get("fragments", {})).items()}
    for _ in range(4):  # fragments may use fragments; a few rounds settle any sane nesting
        fragments = {k: expand(v, fragments) for k, v in fragments.items()}
    signatures: list[Signature] = []
    seen: dict[str, str] = {}
    for source, doc in families:
        for raw in doc.get("signature", []):
            entry = dict(raw)
            entry["pattern"] = expand(str(entry.get("pattern", "")), fragments)
            try:
                sig = Signature.model_validate(entry)
            except ValueError as exc:
                raise CatalogueError(f"{source}: invalid signature {entry.get('id')!r}: {exc}") from exc
            if sig.id in seen:
                raise CatalogueError(f"{source}: duplicate signature id {sig.id!r} (first in {seen[sig.id]})")
            seen[sig.id] = source
            signatures.append(sig)
    dangling = sorted({v for sig in signatures for v in sig.voids} - seen.keys())
    if dangling:
        raise CatalogueError(f"a signature voids unknown signature ids {dangling}")
    return version, tuple(signatures)


def load_packaged() -> tuple[int, tuple[Signature, ...]]:
    data = resources.files(_DATA_PACKAGE).joinpath("data")
    meta = tomllib.loads(data.joinpath(_META_FILE).read_text(encoding="utf-8"))
    files = sorted((f for f in data.iterdir() if f.name.endswith(".toml") and f.name != _META_FILE),
                   key=lambda f: f.name)
    families: list[tuple[str, Mapping[str, Any]]] = [
        (f.name, tomllib.loads(f.read_text(encoding="utf-8"))) for f in files]
    # Each vendor table generates its own family: NVIDIA's Xid catalogue (one signature per Xid in
    # use, and the decode rules), and every table `code_tables` lists (one signature per code that
    # no hand-written rule reads).
    tables: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = [
        (TABLE_FILE, lambda: signature_entries(load_table())),
        *((m.TABLE_FILE, functools.partial(code_tables.generated, m)) for m in code_tables.MODULES),
    ]
    for name, generate in tables:
        try:
            generated = generate()
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogueError(f"vendor/{name}: {exc}") from exc
        families.append((f"vendor/{name}", {"signature": generated}))
    return parse(meta, families)
