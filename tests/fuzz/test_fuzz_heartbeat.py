"""Hostile heartbeats over real HTTP, and hostile job output read for peers' connection-lost lines.

A heartbeat body is a loopback or remote peer's bytes: the server answers 200 only to the node's
own token and otherwise 400, 401, 413 or 415, never a 5xx, and a refused body leaves the tracker
as it was. A job's output tail is the job's bytes: `peer_lines` returns at most three bounded lines,
each naming the node as a word.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput.detect.node_liveness import (
    MAX_LINE_CHARS,
    MAX_PEER_LINES,
    LivenessConfig,
    LivenessTracker,
    heartbeat_token,
    peer_lines,
)
from tests.fuzz.harness import rejects_cleanly, served_in_thread
from tests.fuzz.log_strategies import REAL_LINES, mutated_line, numbers
from workers.liveness import HeartbeatServer

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

SECRET = b"f" * 32
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
NODES = ["node3", "gpu-a17", "n", "node3.cluster", "x" * 70]
lines = st.one_of(st.sampled_from(REAL_LINES), mutated_line(max_repeat=2_000), st.text(max_size=60))


@given(st.lists(lines, max_size=12), st.sampled_from(NODES), st.sampled_from(
    ["Connection reset by peer", "Connection closed by peer [{}]:4242", "{}: Broken pipe", "{}"]))
def test_peer_lines(body: list[str], node: str, planted: str) -> None:
    tail = "\n".join([*body, planted.format(node), *body])
    found = rejects_cleanly("liveness-peer-lines", lambda: peer_lines(tail, node), ())
    assert found is not None and len(found) <= MAX_PEER_LINES
    assert all(len(line) <= MAX_LINE_CHARS and node in line for line in found)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, LivenessTracker]]:
    """A real server on 127.0.0.1 in its own thread and loop, shared by every example."""
    config = LivenessConfig(enabled=True, port=0)
    tracker = LivenessTracker(config)
    with served_in_thread(HeartbeatServer(config, tracker, "lab", SECRET, clock=lambda: NOW)) as server:
        yield server.url, tracker


values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=80),
                   st.sampled_from(NODES), st.lists(st.integers(), max_size=3), numbers)
raw = st.sampled_from([b"", b"{", b"[]", b"null", b'{"node": "node3", "interval_s": 1' + b"0" * 500 + b"}",
                       b"[" * 600 + b"]" * 600, b'{"node": "\\ud800"}', b"\xff\xfe"])


@settings(max_examples=settings.default.max_examples if os.environ.get("GOODPUT_FUZZ_PROFILE") == "fuzz"
          else max(1, settings.default.max_examples // 10))
@given(st.one_of(raw, st.dictionaries(st.sampled_from(["cluster", "node", "interval_s", "x"]), values,
                                      max_size=4).map(lambda d: json.dumps(d).encode())),
       st.sampled_from(NODES), st.sampled_from(["application/json", "text/plain"]))
def test_heartbeat_over_http(served: tuple[str, LivenessTracker], body: bytes, token_node: str,
                             content_type: str) -> None:
    url, tracker = served
    before = len(tracker)
    token = heartbeat_token(SECRET, "lab", token_node)

    def post() -> httpx.Response:
        return httpx.post(f"{url}/v1/heartbeat", content=body, timeout=30,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": content_type})

    response = rejects_cleanly("liveness-heartbeat-http", post, ())
    assert response is not None
    assert response.status_code in (200, 400, 401, 413, 415), response.text
    if response.status_code == 200:
        assert response.json() == {"node": token_node}
    else:
        assert response.json()["error"] and len(tracker) == before
