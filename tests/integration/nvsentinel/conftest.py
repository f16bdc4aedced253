"""The NVSentinel receivers as fixtures for the tests in this directory only (their names, `sink`
and `http` among them, would mean something else elsewhere): both receivers on ephemeral ports of
127.0.0.1 with the test token, a gRPC channel and an HTTP client to them. Function-scoped: each test
gets fresh receivers and a fresh dedup window."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
import pytest_asyncio

from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelSettings
from tests.fakes.sink import RecordingSink
from tests.integration.nvsentinel.cases import TOKEN
from workers.nvsentinel.server import NvSentinelReceivers, serve_nvsentinel


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest_asyncio.fixture
async def receivers(sink: RecordingSink) -> AsyncIterator[NvSentinelReceivers]:
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_port=0, tokens=(TOKEN,),
                                  max_message_bytes=64 << 10, max_events_per_batch=50)
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        yield running


@pytest_asyncio.fixture
async def channel(receivers: NvSentinelReceivers) -> AsyncIterator[grpc.aio.Channel]:
    assert receivers.grpc is not None
    async with grpc.aio.insecure_channel(receivers.grpc.target) as open_channel:
        yield open_channel


@pytest_asyncio.fixture
async def http(receivers: NvSentinelReceivers) -> AsyncIterator[httpx.AsyncClient]:
    assert receivers.http is not None
    async with httpx.AsyncClient(timeout=10) as client:
        yield client
