"""The chart, loaded once per test module by Helm's own engine (helm-python-sdk)."""

from __future__ import annotations

from collections.abc import Iterator

import helm_python
import pytest

from tests.deploy.chart import CHART


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded
