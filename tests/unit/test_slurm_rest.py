"""slurmrestd backend: version negotiation, capabilities, error mapping, fallback routing."""

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.fakes.scheduler import FakeClusterState, FakeScheduler
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import (
    NodeInfo,
    NotOwnedError,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    TransientSchedulerError,
    UnknownJobError,
)
from goodput.slurm import restapi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SPEC_22_05 = json.loads((FIXTURES / "openapi-paths-22.05.json").read_text())
SQUEUE_24_11 = json.loads((FIXTURES / "squeue-24.11-synthetic.json").read_text())
NODES_24_11 = json.loads((FIXTURES / "scontrol-nodes-24.11-synthetic.json").read_text())


def newer_spec(*versions: str) -> dict[str, Any]:
    paths: dict[str, list[str]] = {}
    for v in versions:
        paths |= {f"/slurm/{v}/jobs": ["get"], f"/slurm/{v}/job/{{job_id}}": ["get", "post", "delete"],
                  f"/slurm/{v}/job/submit": ["post"], f"/slurm/{v}/nodes": ["get"],
                  f"/slurm/{v}/node/{{node_name}}": ["get", "post", "delete"]}
    return {"openapi": "3.0.3", "paths": paths}


def test_22_05_negotiates_v0_0_38_without_node_updates() -> None:
    assert restapi.advertised_versions(SPEC_22_05) == ["v0.0.36", "v0.0.37", "v0.0.38"]
    version = restapi.choose_version(SPEC_22_05)
    assert version == "v0.0.38"
    assert restapi.capabilities(SPEC_22_05, version) == {
        restapi.Capability.READ, restapi.Capability.JOB_UPDATE, restapi.Capability.JOB_CANCEL}


def test_newest_common_version_wins() -> None:
    spec = newer_spec("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43")
    assert restapi.choose_version(spec) == "v0.0.42"
    assert restapi.Capability.NODE_UPDATE in restapi.capabilities(spec, "v0.0.42")


def test_no_common_version_is_permanent() -> None:
    with pytest.raises(PermanentSchedulerError, match=r"v0\.0\.35"):
        restapi.choose_version(newer_spec("v0.0.35"))


class Server:
    """A scripted slurmrestd: routes (method, path) to (status, body) and records requests."""

    def __init__(self, spec: dict[str, Any], routes: dict[tuple[str, str], tuple[int, Any]]) -> None:
        self.routes = {("GET", "/openapi/v3"): (200, spec), **routes}
        self.seen: list[tuple[str, str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, body))
        assert request.headers["X-SLURM-USER-TOKEN"] == "jwt-token"
        assert request.headers["X-SLURM-USER-NAME"] == "goodput"
        status, payload = self.routes.get((request.method, request.url.path), (404, {"errors": ["no route"]}))
        if isinstance(payload, Exception):
            raise payload
        return httpx.Response(status, json=payload)

    def backend(self, fallback: Scheduler | None = None) -> SlurmRestBackend:
        return SlurmRestBackend("http://restd.test", user="goodput", token=lambda: "jwt-token",
                                fallback=fallback, transport=httpx.MockTransport(self.handler))


def node_doc(name: str, states: list[str], reason: str = "", user: str = "") -> dict[str, Any]:
    return {"nodes": [{"name": name, "state": states, "reason": reason, "reason_set_by_user": user,
                       "gres": "gpu:8"}], "errors": []}


async def test_reads_24_11_shapes_over_rest() -> None:
    v = "v0.0.42"
    server = Server(newer_spec(v), {("GET", f"/slurm/{v}/jobs"): (200, SQUEUE_24_11),
                                    ("GET", f"/slurm/{v}/nodes"): (200, NODES_24_11)})
    backend = server.backend()
    jobs = {j.job_id: j for j in await backend.list_jobs()}
    assert jobs["101"].nodes == ("node1", "node2") and jobs["102"].held
    nodes = {n.name: n for n in await backend.list_nodes()}
    assert nodes["node3"].drained and nodes["node3"].reason == "goodput:inc-7f3a: xid 79"
    await backend.aclose()


async def test_drain_and_resume_over_rest_when_the_version_can() -> None:
    v = "v0.0.42"
    path = f"/slurm/{v}/node/node1"
    server = Server(newer_spec(v), {("GET", path): (200, node_doc("node1", ["IDLE"])),
                                    ("POST", path): (200, {"errors": []})})
    backend = server.backend()
    assert (await backend.drain_node("node1", "goodput:inc-1: xid 79")).changed
    assert server.seen[-1] == ("POST", path, {"state": ["DRAIN"], "reason": "goodput:inc-1: xid 79"})
    server.routes[("GET", path)] = (200, node_doc("node1", ["IDLE", "DRAIN"], "admin: fan", "alice"))
    assert not (await backend.drain_node("node1", "goodput:inc-1: xid 79")).changed
    with pytest.raises(NotOwnedError):
        await backend.resume_node("node1", "goodput:inc-1: xid 79")
    assert [s for s in server.seen if s[0] == "POST"] == [("POST", path, {"state": ["DRAIN"],
                                                                          "reason": "goodput:inc-1: xid 79"})]
    await backend.aclose()


async def test_v0_0_38_routes_node_updates_and_requeue_to_the_fallback() -> None:
    fake = FakeScheduler(FakeClusterState(nodes={"node1": NodeInfo(name="node1", state="IDLE")}))
    v = "v0.0.38"
    job = {"job_id": 7, "job_state": "RUNNING", "comment": "goodput:opt-in", "nodes": "node1",
           "partition": "gpu", "requeue": True}
    server = Server(SPEC_22_05, {("GET", f"/slurm/{v}/job/7"): (200, {"jobs": [job], "errors": []})})
    backend = server.backend(fallback=fake)
    assert (await backend.drain_node("node1", "goodput:inc-1: x")).changed
    assert fake.journal("drain")
    assert not [s for s in server.seen if s[0] != "GET"]
    bare = server.backend()
    with pytest.raises(PermanentSchedulerError, match="fallback"):
        await bare.requeue_job("7")
    await backend.aclose()
    await bare.aclose()


@pytest.mark.parametrize(("status", "payload", "error"), [
    (500, {"errors": [{"error": "Invalid job id specified", "error_number": 2017}]}, UnknownJobError),
    (500, {"errors": [{"error": "Unspecified error", "source": "slurm_load_jobs"}]}, TransientSchedulerError),
    (503, {}, TransientSchedulerError),
    (401, {"errors": ["Authentication failure"]}, PermanentSchedulerError),
    (400, {"errors": [{"error": "Unknown key exclude"}]}, PermanentSchedulerError),
    (200, httpx.ConnectError("connection refused"), TransientSchedulerError),
])
async def test_errors_are_classified(status: int, payload: Any, error: type[Exception]) -> None:
    v = "v0.0.38"
    backend = Server(SPEC_22_05, {("GET", f"/slurm/{v}/job/7"): (status, payload)}).backend()
    with pytest.raises(error) as caught:
        await backend.get_job("7")
    if error is PermanentSchedulerError:
        assert type(caught.value) is PermanentSchedulerError
    await backend.aclose()


@pytest.mark.parametrize("bad", ["7;rm -rf /", "../../openapi", "7\n", "x" * 10_000])
async def test_hostile_identifiers_send_nothing(bad: str) -> None:
    server = Server(SPEC_22_05, {})
    backend = server.backend(fallback=FakeScheduler())
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.get_job(bad), lambda: backend.get_node(bad), lambda: backend.cancel_job(bad),
        lambda: backend.hold_job(bad), lambda: backend.requeue_job(bad),
        lambda: backend.drain_node(bad, "goodput:i: x"),
        lambda: backend.resubmit_job("7", ResubmitRequest(exclude=(bad,)))]
    for call in calls:
        with pytest.raises(InvalidIdentifierError):
            await call()
    assert server.seen == []
    await backend.aclose()
