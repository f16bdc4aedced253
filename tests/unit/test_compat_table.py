"""docs/slurm.md's compatibility table is what the contract suite's recorded run says, cell by cell."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results" / "slurm-matrix.xml"
DOC = REPO / "docs" / "slurm.md"
CONTRACT = REPO / "tests" / "slurm" / "test_contract.py"

pytestmark = pytest.mark.timeout(30)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_table_script", REPO / "scripts" / "compat_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


compat = _script()


def test_the_committed_table_is_the_committed_runs() -> None:
    doc = DOC.read_text()
    assert compat.START in doc and compat.END in doc, "docs/slurm.md has no generated compatibility table"
    table = doc.split(compat.START, 1)[1].split(compat.END, 1)[0].strip("\n") + "\n"
    assert table == compat.render(RESULTS), (
        "regenerate: .venv/bin/python scripts/compat_table.py docs/results/slurm-matrix.xml --write docs/slurm.md")


def test_every_contract_test_and_cell_has_a_place_in_the_table() -> None:
    tree = ast.parse(CONTRACT.read_text())
    tests = {f.name for f in tree.body if isinstance(f, ast.AsyncFunctionDef | ast.FunctionDef)
             and f.name.startswith("test_")}
    assert tests == set(compat.OPERATIONS), "a contract test the table does not name, or a name of no test"
    cells = set(re.findall(r'"(fake|pyslurm|slurm-[a-z]+(?:-[0-9.]+)?)"', CONTRACT.read_text()))
    assert cells == set(compat.CELLS)


def test_the_committed_run_covers_every_cell_with_nothing_left_unrun() -> None:
    rendered = compat.render(RESULTS)
    assert "**FAIL**" not in rendered and "not run" not in rendered
    header = rendered.splitlines()[0]
    assert all(f"{version} {backend}" in header for version, backend in compat.CELLS.values())


def junit(*cases: str) -> str:
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


def case(name: str, body: str = "") -> str:
    return f'<testcase classname="tests.slurm.test_contract" name="{name}">{body}</testcase>'


def test_failures_not_applicable_and_unrun_cells_are_told_apart(tmp_path: Path) -> None:
    results = tmp_path / "run.xml"
    results.write_text(junit(
        case("test_cancel_is_idempotent[slurm-cli]"),
        case("test_cancel_is_idempotent[slurm-rest-24.11]", '<failure message="boom"/>'),
        case("test_requeue_restarts_the_job[slurm-cli]", '<error message="setup"/>'),
        case("test_requeue_restarts_the_job[slurm-rest-24.11]", '<skipped message="n/a: no REST requeue"/>'),
        case("test_hostile_identifiers_are_refused_before_any_call[slurm-cli-$(reboot)]"),
        case("test_hostile_identifiers_are_refused_before_any_call[slurm-rest-24.11-x]",
             '<skipped message="Slurm 24.11 not selected"/>'),
        '<testcase classname="tests.slurm.test_rest" name="test_other[slurm-cli]"><failure/></testcase>'))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in compat.render(results).splitlines()}
    assert rows["cancel (idempotent)"] == "| cancel (idempotent) | pass | **FAIL** |"
    assert rows["requeue"] == "| requeue | **FAIL** | n/a (1) |"
    assert rows["hostile identifiers refused before any call"].endswith("| pass | not run |")
    assert "1. no REST requeue" in rows


def test_write_replaces_only_the_table(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{compat.START}\nold\n{compat.END}\nafter\n")
    results = tmp_path / "run.xml"
    results.write_text(junit(case("test_job_detail[fake]")))
    assert compat.main([str(results), "--write", str(doc)]) == 0
    assert doc.read_text() == f"before\n{compat.START}\n{compat.render(results)}{compat.END}\nafter\n"
