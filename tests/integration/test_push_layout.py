"""`POST /v1/layout` on the real push server (127.0.0.1, ephemeral port): what goodput's Slurm prolog
and epilog send, over real HTTP, into a real LayoutStore."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from activities.adapters.layout import LayoutStore
from goodput.detect.push import PushConfig
from goodput.detect.push.layout import MAX_LAYOUT_BODY
from tests.fakes.sink import RecordingSink
from workers.push import LAYOUT_PATH, PushServer, serve_push

TOKEN = "layout-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
CONFIG = PushConfig(enabled=True, port=0, tokens=(TOKEN,), max_body_bytes=1 << 20)


def record(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1, "event": "prolog", "job_id": "501", "restart_count": 0, "node": "node2",
        "nodelist": "node[1-2]", "gpus": [{"index": 0, "pci_bus_id": "00000000:3B:00.0",
                                            "uuid": "GPU-aaaaaaaa-0000", "serial": "42"}],
        "check": {"status": "ok", "detail": "nvidia-smi lists 8 GPUs"}}
    body.update(changes)
    return body


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> LayoutStore:
    return LayoutStore(tmp_path / "layouts", max_nodes_per_job=2)


@pytest_asyncio.fixture
async def http(store: LayoutStore) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_push(CONFIG, RecordingSink(), "lab", layouts=store) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        yield client


async def test_prolog_then_epilog_records_are_stored(http: httpx.AsyncClient, store: LayoutStore) -> None:
    response = await http.post(LAYOUT_PATH, json=record(), headers=AUTH)
    assert response.status_code == 200
    assert response.json() == {"stored": "prolog", "cluster": "lab", "job_id": "501", "attempt": 0, "node": "node2",
                               "node_index": 1, "node_count": 2}
    ended = record(event="epilog", check={"status": "failed", "detail": "nvidia-smi did not answer within 3 s"})
    assert (await http.post(LAYOUT_PATH, json=ended, headers=AUTH)).status_code == 200
    layout = store.job_layout("lab", "501", 0)
    assert layout is not None
    [node] = layout.nodes
    assert (node.node, node.node_index, node.check.status, node.gpus[0].pci_bus_id) == (
        "node2", 1, "ok", "00000000:3B:00.0")
    assert node.ended_at is not None and node.end_check is not None and node.end_check.status == "failed"


async def test_the_token_is_required(http: httpx.AsyncClient) -> None:
    for headers in ({"Content-Type": "application/json"}, {**AUTH, "Authorization": "Bearer wrong-token-0123456"}):
        response = await http.post(LAYOUT_PATH, json=record(), headers=headers)
        assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("content", "headers", "status", "says"), [
    (json.dumps(record(node="node9")), AUTH, 400, "not in the job's node list"),
    (json.dumps(record(job_id="501; rm -rf /")), AUTH, 400, "job_id"),
    (json.dumps(record(cluster="elsewhere")), AUTH, 400, "not served here"),
    ("not json", AUTH, 400, "Invalid JSON"),
    (json.dumps(record()), {**AUTH, "Content-Type": "text/plain"}, 415, "application/json"),
    ("x" * (MAX_LAYOUT_BODY + 1), AUTH, 413, "limit"),
])
async def test_refusals_say_why(http: httpx.AsyncClient, content: str, headers: dict[str, str], status: int,
                                says: str) -> None:
    response = await http.post(LAYOUT_PATH, content=content, headers=headers)
    assert response.status_code == status and says in response.json()["error"]


async def test_a_chunked_body_over_the_limit_is_413(http: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b" " * (MAX_LAYOUT_BODY // 2)

    response = await http.post(LAYOUT_PATH, content=chunks(), headers=AUTH)
    assert response.status_code == 413 and "limit" in response.json()["error"]


async def test_a_full_job_is_409_and_a_broken_store_503(http: httpx.AsyncClient, store: LayoutStore) -> None:
    for node in ("node1", "node2"):
        assert (await http.post(LAYOUT_PATH, json=record(node=node), headers=AUTH)).status_code == 200
    many = record(node="node3", nodelist="node[1-3]")
    assert (await http.post(LAYOUT_PATH, json=many, headers=AUTH)).status_code == 409
    store.root = store.root / "lab" / "501" / "0" / "node1.json"  # a file where a directory must be
    response = await http.post(LAYOUT_PATH, json=record(job_id="502"), headers=AUTH)
    assert response.status_code == 503 and "could not store" in response.json()["error"]


async def test_without_a_store_there_is_no_layout_route() -> None:
    server: PushServer
    async with serve_push(CONFIG, RecordingSink(), "lab") as server, \
            httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post(LAYOUT_PATH, json=record(), headers=AUTH)
    assert response.status_code == 404
