"""Hostile GPU reports over real HTTP: 200 only for the node's own token and a valid report, otherwise
400, 401, 413 or 415, never a 5xx, and a refused body leaves the sample store as it was."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from tests.fuzz.harness import rejects_cleanly, served_in_thread
from tests.fuzz.log_strategies import numbers
from workers.gpu_feed import GPU_SAMPLES_PATH, GpuFeedEndpoint
from workers.liveness import HeartbeatServer

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

SECRET = b"f" * 32
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
NODES = ["node3", "gpu-a17", "n", "node3.cluster", "x" * 70]
FIELDS = ["index", "uuid", "pci_bus_id", "utilisation_pct", "memory_utilisation_pct", "sm_clock_mhz",
          "max_sm_clock_mhz", "power_w", "temperature_c", "clock_event_mask", "pcie_replay_count",
          "nvlink_error_count", "gpu_lost", "x"]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, GpuSampleStore]]:
    store = GpuSampleStore(window=4, max_age_s=3600, max_nodes=8)
    config = LivenessConfig(enabled=True, port=0)
    server = HeartbeatServer(config, LivenessTracker(config), "lab", SECRET, clock=lambda: NOW,
                             routes=[GpuFeedEndpoint(store, "lab", SECRET, clock=lambda: NOW).route()])
    with served_in_thread(server) as running:
        yield running.url, store


values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=40),
                   st.lists(st.integers(), max_size=3), numbers)
gpus = st.lists(st.dictionaries(st.sampled_from(FIELDS), values, max_size=6), max_size=70)
raw = st.sampled_from([b"", b"{", b"[]", b"null", b"[" * 600 + b"]" * 600, b'{"node": "\\ud800"}', b"\xff\xfe",
                       b'{"cluster": "lab", "node": "node3", "gpus": [{"utilisation_pct": 1' + b"0" * 500 + b"}]}"])


@settings(max_examples=settings.default.max_examples if os.environ.get("GOODPUT_FUZZ_PROFILE") == "fuzz"
          else max(1, settings.default.max_examples // 10))
@given(st.one_of(raw, st.fixed_dictionaries({"cluster": st.sampled_from(["lab", "other"]),
                                             "node": st.sampled_from(NODES), "gpus": gpus}).map(
           lambda d: json.dumps(d).encode())),
       st.sampled_from(NODES), st.sampled_from(["application/json", "text/plain"]))
def test_gpu_report_over_http(served: tuple[str, GpuSampleStore], body: bytes, token_node: str,
                              content_type: str) -> None:
    url, store = served
    before = [(n, store.reports(n, NOW)) for n in NODES]
    token = heartbeat_token(SECRET, "lab", token_node)

    def post() -> httpx.Response:
        return httpx.post(f"{url}{GPU_SAMPLES_PATH}", content=body, timeout=30, trust_env=False,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": content_type})

    response = rejects_cleanly("gpu-feed-http", post, ())
    assert response is not None
    assert response.status_code in (200, 400, 401, 413, 415), response.text
    if response.status_code == 200:
        assert response.json()["node"] == token_node
        assert all(s.node == token_node for s in store.reports(token_node, NOW)[-1][1])
    else:
        assert response.json()["error"] and [(n, store.reports(n, NOW)) for n in NODES] == before
