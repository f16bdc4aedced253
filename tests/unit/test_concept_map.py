"""The concept map at the top of docs/architecture.md cannot drift from the tree.

A rename, a new module or a deleted one fails here until the map says where it went, so every
concept stays findable from the map in one step (#27)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
# Every module of these trees must be on some concept's line (or under a folder that is).
COVERED_TREES = ("goodput", "workflows", "activities", "workers")
START, END = "<!-- concept-map", "<!-- /concept-map -->"

pytestmark = pytest.mark.timeout(30)


def concept_rows(text: str) -> dict[str, list[str]]:
    """The map's rows: concept name -> the paths in backticks on its line."""
    if START not in text or END not in text:
        raise AssertionError(f"docs/architecture.md has no concept map ({START} … {END})")
    block = text.split(START, 1)[1].split(END, 1)[0]
    rows: dict[str, list[str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("concept", "---") or not line.startswith("|"):
            continue
        name, files = cells
        assert name not in rows, f"concept {name!r} has two lines in the map"
        rows[name] = re.findall(r"`([^`]+)`", files)
        assert rows[name], f"concept {name!r} lists no files"
    return rows


def matches(entry: str) -> list[Path]:
    if any(ch in entry for ch in "*?["):
        return sorted(REPO.glob(entry))
    path = REPO / entry
    return [path] if path.exists() else []


def covered(module: str, entries: list[str]) -> bool:
    for entry in entries:
        if entry.endswith("/") and module.startswith(entry):
            return True
        if any(ch in entry for ch in "*?[") and Path(module).match(entry):
            return True
        if module == entry:
            return True
    return False


def shipped_modules() -> list[str]:
    return sorted(
        p.relative_to(REPO).as_posix()
        for tree in COVERED_TREES for p in (REPO / tree).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def test_the_map_is_at_the_top_of_the_architecture_doc() -> None:
    text = DOC.read_text()
    first_section = text.index("\n## ")
    assert text.index("## Concept map") == first_section + 1, "the concept map must be the doc's first section"


def test_every_path_in_the_map_exists() -> None:
    rows = concept_rows(DOC.read_text())
    missing = [f"{name}: {entry}" for name, entries in rows.items() for entry in entries if not matches(entry)]
    assert not missing, "paths in docs/architecture.md's concept map that do not exist:\n" + "\n".join(missing)


def test_every_module_is_on_some_concepts_line() -> None:
    entries = [e for es in concept_rows(DOC.read_text()).values() for e in es]
    orphans = [m for m in shipped_modules() if not covered(m, entries)]
    assert not orphans, (
        "modules missing from docs/architecture.md's concept map (add each to its concept's line, "
        "or to infrastructure):\n" + "\n".join(orphans))


def test_the_checker_sees_drift() -> None:
    # The checks above must fail on a map that drifted: a renamed file, a module nobody listed.
    text = DOC.read_text().replace("`workflows/breaker.py`", "`workflows/breaker_gate.py`")
    rows = concept_rows(text)
    assert not matches("workflows/breaker_gate.py")
    assert not covered("workflows/breaker.py", [e for es in rows.values() for e in es])
    assert covered("goodput/diagnose/signatures/matcher.py", ["goodput/diagnose/"])
    assert covered("tests/unit/test_slurm_json.py", ["tests/unit/test_slurm_*.py"])
