"""deploy/requirements.lock pins what pyproject.toml pins, so the image installs what was tested."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_requirements", ROOT / "scripts" / "lock_requirements.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lock_agrees_with_every_exact_pin_in_pyproject() -> None:
    script = _lock_script()
    assert script.disagreements(script.LOCK.read_text()) == []
    # every locked package is followed by its hash lines (pip checks a constraint's hashes)
    lines = [line for line in script.LOCK.read_text().splitlines() if not line.startswith("#")]
    pins = [n for n, line in enumerate(lines) if not line.startswith(" ")]
    assert len(pins) > 20
    assert all(lines[n + 1].lstrip().startswith("--hash=sha256:") for n in pins)

def test_a_drifted_pin_is_reported() -> None:
    script = _lock_script()
    drifted = script.LOCK.read_text().replace("temporalio==1.35.0", "temporalio==1.0.0")
    assert any(p.startswith("temporalio:") for p in script.disagreements(drifted))
