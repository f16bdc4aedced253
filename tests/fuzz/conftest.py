"""Hypothesis profiles for the hostile-input suites.

`suite` (the default, in `make test`): 5,000 examples per target, derandomized so CI is
repeatable, no deadline (a pathological input still fails through pytest-timeout, and a timed
assertion on a slow CI machine would be flaky). `fuzz` (`make fuzz`): 100,000 random examples
per target, each parser call limited to 1 s of CPU (tests/fuzz/harness.py) and each example to
10 s of wall clock (an input that blocks burns no CPU). No example database is written into the
tree.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings

from tests.fuzz.harness import write_report

_COMMON = dict(database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                     HealthCheck.filter_too_much])
settings.register_profile("suite", max_examples=5_000, deadline=None, derandomize=True, **_COMMON)
settings.register_profile("fuzz", max_examples=100_000, deadline=timedelta(seconds=10), **_COMMON)
PROFILE = os.environ.get("GOODPUT_FUZZ_PROFILE", "suite")
settings.load_profile(PROFILE)
# At 100,000 examples a slow target (real checkpoint trees, HTTP round trips) runs for most of an
# hour on a busy machine; the per-input deadline is the limit that matters there, not this one.
FUZZ_TARGET_TIMEOUT_S = 4 * 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if PROFILE == "fuzz":
        for item in items:
            item.add_marker(pytest.mark.timeout(FUZZ_TARGET_TIMEOUT_S))  # the closest marker wins


def pytest_sessionfinish() -> None:
    write_report()
