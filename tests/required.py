"""Skips that CI may not take.

A test that needs a tool CI installs (the Slurm lab, shellcheck, systemd-analyze, submitit) skips
where the tool is missing, so that a laptop without it can still run the suite; under
GOODPUT_REQUIRE_SLURM=1, which .ci/run sets, the missing tool is a failure instead, for a CI run
that silently skipped its only real check of something would look green while testing nothing.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRED = "GOODPUT_REQUIRE_SLURM"


def required() -> bool:
    return os.environ.get(REQUIRED) == "1"


def unavailable(message: str) -> NoReturn:
    """Skip (fail under GOODPUT_REQUIRE_SLURM=1); also at module level, where a failure is a
    collection error."""
    if required():
        pytest.fail(f"{REQUIRED}=1 but {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_command(name: str, install: str) -> str:
    """The path of command `name`; `install` says how to get it."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed ({install})")
    return path


def require_module(name: str, install: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        unavailable(f"python module {name} is missing ({install}): {err}")
