"""Hostile stack results over real HTTP, and hostile dump text read for the odd process out.

A `/v1/stacks` body is a node's bytes: the server answers only 200, 400, 401, 409, 413 or 415, never a
5xx, and a refused body leaves the request's answers as they were. A dump is the job's text:
`evidence` returns a line per node and a culprit only among the processes it was given.
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

from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.stack_requests import NodeStacks, StackRequestTable, evidence, request_id
from tests.fuzz.harness import rejects_cleanly, served_in_thread
from tests.fuzz.log_strategies import REAL_LINES, mutated_line
from workers.liveness import HeartbeatServer

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

SECRET = b"f" * 32
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
RID = request_id("fuzz", "4242")
FRAMES = ["Process 11: python train.py", 'Thread 11 (active): "MainThread"',
          "    all_reduce (torch/distributed/distributed_c10d.py:2501)", "    save (torch/serialization.py:652)",
          'Thread 0x00007f3a00000001 (most recent call first):', '  File "/srv/train.py", line 88 in main']
lines = st.one_of(st.sampled_from(FRAMES + REAL_LINES[:50]), mutated_line(max_repeat=2_000), st.text(max_size=60))
dumps = st.dictionaries(st.integers(2, 99), st.lists(lines, max_size=20).map("\n".join), max_size=4)
# Each example runs the catalogue over every line: a tenth of the examples outside the fuzz profile.
FEWER = settings(max_examples=settings.default.max_examples if os.environ.get("GOODPUT_FUZZ_PROFILE") == "fuzz"
                 else max(1, settings.default.max_examples // 10))


@FEWER
@given(st.dictionaries(st.sampled_from(["node1", "node2", "node3"]), dumps, max_size=3))
def test_evidence_from_hostile_dumps(answers: dict[str, dict[int, str]]) -> None:
    table = StackRequestTable(ttl_s=60)
    request = table.ask(RID, "4242", ["node1", "node2", "node3"], NOW)
    for node, given_dumps in answers.items():
        table.answer(node, NodeStacks(request_id=RID, job_id="4242", dumps=given_dumps), NOW)
    found = rejects_cleanly("stack-evidence", lambda: evidence(request, table.answers(RID), 30.0), ())
    assert found is not None and len(found.lines) == 3
    if found.culprit is not None:
        assert found.node in answers and found.culprit.id.endswith(f" on {found.node}")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, StackRequestTable]]:
    table = StackRequestTable(ttl_s=3600)
    table.ask(RID, "4242", ["node3"], NOW)
    server = HeartbeatServer(LivenessConfig(enabled=True, port=0), LivenessTracker(LivenessConfig()), "lab", SECRET,
                             clock=lambda: NOW, stacks=table)
    with served_in_thread(server) as running:
        yield running.url, table


values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=80), st.sampled_from([RID, "4242"]),
                   st.dictionaries(st.text(max_size=8), st.text(max_size=40), max_size=3))
results = st.dictionaries(st.sampled_from(["request_id", "job_id", "dumps", "signalled", "skipped", "error"]), values,
                          max_size=6)
raw = st.sampled_from([b"", b"{", b"[]", b"null", b"[" * 600 + b"]" * 600, b'{"node": "\\ud800"}', b"\xff\xfe"])


@FEWER
@given(st.one_of(raw, st.fixed_dictionaries({"cluster": st.sampled_from(["lab", "x"]),
                                             "node": st.sampled_from(["node3", "node4", "bad node"]),
                                             "result": st.one_of(results, values)}).map(
    lambda d: json.dumps(d).encode())), st.sampled_from(["node3", "node4"]))
def test_stack_results_over_http(served: tuple[str, StackRequestTable], body: bytes, token_node: str) -> None:
    url, table = served
    before = table.answers(RID)
    token = heartbeat_token(SECRET, "lab", token_node)

    def post() -> httpx.Response:
        return httpx.post(f"{url}/v1/stacks", content=body, timeout=30,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})

    response = rejects_cleanly("stack-results-http", post, ())
    assert response is not None
    assert response.status_code in (200, 400, 401, 409, 413, 415), response.text
    if response.status_code != 200:
        assert response.json()["error"] and table.answers(RID) == before
