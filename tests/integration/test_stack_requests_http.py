"""Stack requests over the real heartbeat endpoint (uvicorn on loopback): a node hears only its own
requests in its heartbeat's response, answers on /v1/stacks with its own token, and a forged,
foreign, malformed or oversized answer is refused with a typed status and changes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from activities.adapters.heartbeat import HeartbeatSender
from activities.adapters.stack_agent import StackResponder
from activities.adapters.stack_dump import StackReport
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.stack_capture import Capture
from goodput.detect.stack_requests import MAX_RESULT_BYTES, StackRequestTable, request_id
from workers.liveness import HeartbeatServer

pytestmark = pytest.mark.timeout(30)
SECRET = b"k" * 40
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RID = request_id("inc-1", "4242")


@pytest.fixture
async def served() -> AsyncIterator[tuple[HeartbeatServer, StackRequestTable]]:
    table = StackRequestTable(ttl_s=60)
    table.ask(RID, "4242", ["node3", "node4"], NOW)
    table.ask(request_id("inc-2", "5151"), "5151", ["node9"], NOW)
    server = HeartbeatServer(LivenessConfig(enabled=True, port=0), LivenessTracker(LivenessConfig()), "c1", SECRET,
                             clock=lambda: NOW, stacks=table)
    await server.start()
    try:
        yield server, table
    finally:
        await server.stop()


def token(node: str) -> str:
    return heartbeat_token(SECRET, "c1", node)


async def post_stacks(server: HeartbeatServer, body: object, tok: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {tok}"} if tok else {})}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=10) as session:
        response = await session.post(f"{server.url}/v1/stacks", content=data, headers=headers)
        return response.status_code, response.text


def answer(node: str, rid: str = RID, job: str = "4242", **result: object) -> dict[str, object]:
    return {"cluster": "c1", "node": node, "result": {"request_id": rid, "job_id": job, **result}}


async def test_a_heartbeat_response_carries_only_the_nodes_own_requests_and_the_agent_answers(
        served: tuple[HeartbeatServer, StackRequestTable]) -> None:
    # broke/before: the heartbeat answered {"node": ...} only and /v1/stacks did not exist (404).
    server, table = served
    captured: list[str] = []

    def capture(job_id: str) -> StackReport:
        captured.append(job_id)
        return StackReport(job_id, dumps={777: "Process 777: python train.py\n" + "x" * 200_000},
                           skipped=(Capture(pid=778, method="skip", reason="py-spy timed out"),))

    responder = StackResponder(server.url, token("node3"), cluster="c1", node="node3", capture=capture)
    sender = HeartbeatSender(server.url, token("node3"), cluster="c1", node="node3", interval_s=2.0,
                             on_response=responder.take)
    async with httpx.AsyncClient(timeout=10) as session:
        assert await sender.beat(session)
        await responder.wait_idle()
        assert captured == ["4242"] and responder.sent == 1
        got = table.answers(RID)["node3"]
        assert set(got.dumps) == {777} and len(got.dumps[777]) <= 64 * 1024
        assert got.dumps[777].endswith("[cut by the agent]") and got.skipped == ("pid 778: py-spy timed out",)
        assert await sender.beat(session)  # answered: not asked again, not captured twice
        await responder.wait_idle()
    assert captured == ["4242"]
    async with httpx.AsyncClient(timeout=10) as session:
        beat = {"cluster": "c1", "node": "node4", "interval_s": 2.0}
        seen = (await session.post(f"{server.url}/v1/heartbeat", json=beat,
                                   headers={"Authorization": f"Bearer {token('node4')}"})).json()
    assert seen == {"node": "node4", "stacks": [{"id": RID, "job_id": "4242"}]}  # never node9's request


async def test_a_forged_or_foreign_answer_is_refused_and_changes_nothing(
        served: tuple[HeartbeatServer, StackRequestTable]) -> None:
    server, table = served
    assert (await post_stacks(server, answer("node3"), token("node4")))[0] == 401  # node4's token for node3
    assert (await post_stacks(server, answer("node3"), None))[0] == 401
    assert (await post_stacks(server, answer("node3"), heartbeat_token(b"x" * 40, "c1", "node3")))[0] == 401
    code, text = await post_stacks(server, answer("node9"), token("node9"))  # authentic, not its request
    assert code == 409 and "not for this node" in text
    code, text = await post_stacks(server, answer("node3", job="5151"), token("node3"))
    assert code == 409 and "job id" in text
    assert table.answers(RID) == {} and server.stacks is not None and server.stacks.rejected == 5


@pytest.mark.parametrize("body, status", [
    (b"{", 400),
    (b"[1]", 400),
    (answer("node3", dumps={"1": "init"}), 400),
    (answer("node3", dumps={"4242": "y" * (64 * 1024 + 1)}), 400),
    (answer("node3", rid="../etc/passwd"), 400),
    ({"cluster": "c1", "node": "node3", "result": "not an object"}, 400),
    (b'{"cluster": "c1", "node": "node3", "pad": "' + b"z" * MAX_RESULT_BYTES + b'"}', 413),
])
async def test_a_bad_or_oversized_answer_is_a_typed_refusal_not_a_crash(
        served: tuple[HeartbeatServer, StackRequestTable], body: object, status: int) -> None:
    server, table = served
    code, text = await post_stacks(server, body, token("node3"))
    assert code == status, text
    assert "error" in json.loads(text) and table.answers(RID) == {}
    code, _ = await post_stacks(server, answer("node3", error="no py-spy here"), token("node3"))
    assert code == 200 and table.answers(RID)["node3"].error == "no py-spy here"  # the server still serves
