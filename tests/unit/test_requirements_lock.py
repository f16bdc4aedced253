"""The locks pin, inside pyproject.toml's ranges, what the image and CI install."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_requirements", ROOT / "scripts" / "lock_requirements.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


SCRIPT = _lock_script()


@pytest.mark.parametrize("lock", SCRIPT.LOCKS, ids=lambda lock: lock.path.name)
def test_each_lock_pins_every_requirement_of_its_install_inside_its_range(lock: object) -> None:
    assert SCRIPT.disagreements(lock, lock.path.read_text()) == []


def test_every_package_of_the_image_lock_carries_its_hash() -> None:
    lines = [line for line in SCRIPT.IMAGE.path.read_text().splitlines() if not line.startswith("#")]
    pins = [n for n, line in enumerate(lines) if not line.startswith(" ")]
    assert len(pins) > 20
    assert all(lines[n + 1].lstrip().startswith("--hash=sha256:") for n in pins)


def test_a_version_outside_the_range_or_a_missing_package_is_reported() -> None:
    text = SCRIPT.CONSTRAINTS.path.read_text()
    drifted = "\n".join("temporalio==1.0.0" if line.startswith("temporalio==") else line for line in text.splitlines())
    assert [p for p in SCRIPT.disagreements(SCRIPT.CONSTRAINTS, drifted) if p.startswith("temporalio:")] == [
        "temporalio: constraints.txt has 1.0.0, outside pyproject's <2,>=1.35"]
    dropped = text.replace("asyncssh==", "not-asyncssh==")
    assert any(p.startswith("asyncssh: required") for p in SCRIPT.disagreements(SCRIPT.CONSTRAINTS, dropped))
