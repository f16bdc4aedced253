"""slurmrestd backend: version negotiation, capabilities, error mapping, fallback routing."""

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import (
    NodeInfo,
    NotOwnedError,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    SchedulerError,
    TransientSchedulerError,
    UnknownJobError,
)
from goodput.slurm import restapi
from goodput.slurm.jsonout import SlurmJsonError

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
    spec = newer_spec("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.45", "v0.0.46")  # v0.0.46: not yet known
    assert restapi.choose_version(spec) == "v0.0.45"
    assert restapi.Capability.NODE_UPDATE in restapi.capabilities(spec, "v0.0.45")


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
        if isinstance(payload, bytes):
            return httpx.Response(status, content=payload)
        return httpx.Response(status, json=payload)

    def backend(self, fallback: Scheduler | None = None) -> SlurmRestBackend:
        return SlurmRestBackend("http://restd.test", user="goodput", token=lambda: "jwt-token", allow_http=True,
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
    # one partition's nodes only (slurmrestd has no filter: the list is narrowed here)
    assert len(await backend.list_nodes("gpu")) == len(nodes) and await backend.list_nodes("nosuch") == []
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


# -- a client that sends a JWT able to act on every job trusts nothing around it ---------------

V38 = "v0.0.38"
JOB7 = f"/slurm/{V38}/job/7"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJnb29kcHV0In0.c2lnbmF0dXJlLW9mLXRoZS1zZWNyZXQ"


async def test_get_job_never_answers_with_another_job() -> None:
    other = {"job_id": 8, "job_state": "RUNNING", "comment": "goodput:opt-in", "nodes": "node1", "partition": "gpu"}
    backend = Server(SPEC_22_05, {("GET", JOB7): (200, {"jobs": [other], "errors": []})}).backend()
    with pytest.raises(UnknownJobError):  # was: job 8, as the first of the list
        await backend.get_job("7")
    await backend.aclose()


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b"{}", b'{"jobs": [1]}', b'{"jobs": "x"}', b'{"jobs": [{"job_id": 7, "name": ["x"]}]}',
    b'{"jobs": [{"job_id": 7' + b"9" * 5000 + b"}]}", b"[" * 100_000,
    b'{"jobs": [{"job_id": 7, "restart_cnt": 1e999}]}',
    b'{"jobs": [{"job_id": 7, "nodes": "n[1-99999]m[1-99999]"}]}', b"\xff\xfe\x00garbage",
])
async def test_answers_of_the_wrong_shape_are_slurm_json_errors(body: bytes) -> None:
    backend = Server(SPEC_22_05, {("GET", JOB7): (200, body),
                                  ("GET", f"/slurm/{V38}/jobs"): (200, body)}).backend()
    with pytest.raises(SlurmJsonError):  # "not JSON" read as {} and then "unknown job", before
        await backend.get_job("7")
    with pytest.raises(SlurmJsonError):  # ... or as an empty cluster
        await backend.list_jobs()
    await backend.aclose()


@pytest.mark.parametrize("spec", [[], {"paths": []}, {"paths": {"/slurm/v0.0.38/jobs": 5}},
                                  {"paths": {"/slurm/" + "x" * 5000: ["get"]}}, {"paths": {1: ["get"]}}])
def test_openapi_documents_of_the_wrong_shape_are_slurm_json_errors(spec: Any) -> None:
    with pytest.raises(SlurmJsonError):
        restapi.choose_version(spec)


def test_versions_with_huge_numbers_are_not_versions() -> None:
    spec = newer_spec("v0.0." + "9" * 900)
    with pytest.raises(PermanentSchedulerError, match="no Slurm API"):
        restapi.choose_version(spec)
    assert restapi.capabilities({"paths": {"/slurm/v0.0.42/job/" + "{" * 900: ["get"]}}, "v0.0.42") == frozenset()


@pytest.mark.parametrize("url", ["http://restd.test", "ftp://restd.test", "https://user:pw@restd.test",
                                 "https://restd.test/?token=x", "https://", "no url at all"])
def test_the_token_goes_only_to_an_https_url_without_credentials(url: str) -> None:
    with pytest.raises(PermanentSchedulerError):
        SlurmRestBackend(url, user="goodput", token=TOKEN)


async def test_plain_http_needs_the_setting() -> None:
    with pytest.raises(PermanentSchedulerError, match="https"):
        SlurmRestBackend("http://127.0.0.1:1", user="goodput", token=TOKEN)
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=SPEC_22_05)
        return httpx.Response(500, text="no job here")

    backend = SlurmRestBackend("http://127.0.0.1:1", user="goodput", token=TOKEN, allow_http=True,
                               transport=httpx.MockTransport(answer))
    with pytest.raises(SchedulerError):
        await backend.get_job("1")
    await backend.aclose()
    # with the setting, the requests do go to the plain-http address, the token with them
    assert sent and {(r.url.scheme, r.url.host, r.url.port) for r in sent} == {("http", "127.0.0.1", 1)}
    assert all(r.headers["X-SLURM-USER-TOKEN"] == TOKEN for r in sent)


async def test_the_token_never_appears_in_errors() -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        token = request.headers["X-SLURM-USER-TOKEN"]
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=SPEC_22_05)
        if request.url.path.endswith("/job/1"):
            return httpx.Response(401, json={"errors": [f"token {token} rejected"]})
        if request.url.path.endswith("/job/2"):
            return httpx.Response(500, text=f"<html>bad token {token}</html>")
        if request.url.path.endswith("/job/3"):
            raise httpx.ConnectError(f"proxy said no to {token}")
        return httpx.Response(400, json={"errors": [{"error": f"who is {token[:-3]}?"}]})

    backend = SlurmRestBackend("https://restd.test", user="goodput", token=TOKEN, transport=httpx.MockTransport(echo))
    for job_id in ("1", "2", "3", "4"):
        with pytest.raises(SchedulerError) as caught:
            await backend.get_job(job_id)
        assert TOKEN not in str(caught.value) and TOKEN[-20:] not in str(caught.value)
        assert "[token]" in str(caught.value)
    await backend.aclose()


@pytest.mark.parametrize("token", ["", "two words", "line\nbreak", "x" * 20_000, "tab\there"])
async def test_a_token_that_is_not_a_jwt_is_refused_without_being_shown(token: str) -> None:
    server = Server(SPEC_22_05, {})
    backend = SlurmRestBackend("https://restd.test", user="goodput", token=token,
                               transport=httpx.MockTransport(server.handler))
    with pytest.raises(PermanentSchedulerError, match="not a JWT") as caught:
        await backend.get_job("7")
    assert not token or token not in str(caught.value)
    assert server.seen == []
    await backend.aclose()


async def test_proxies_and_netrc_from_the_environment_are_ignored(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    heads: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append((await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower())
        body = json.dumps({"openapi": "3.0.2", "paths": {}}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with socket.socket() as probe:  # a port nothing listens on: where a proxy would send us
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login intruder password stolen\n")
    netrc.chmod(0o600)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(netrc))
    backend = SlurmRestBackend(f"http://127.0.0.1:{port}", user="goodput", token=TOKEN, allow_http=True)
    try:
        with pytest.raises(PermanentSchedulerError, match="no Slurm API"):  # the server itself answered
            await backend.api_version()
    finally:
        await backend.aclose()
        server.close()
        await server.wait_closed()
    assert len(heads) == 1 and "authorization" not in heads[0]


async def test_a_request_nobody_answers_says_how_long_it_waited() -> None:
    """A hung slurmrestd: the step's retry reason names the wait, not httpx's empty message."""
    def hangs(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=SPEC_22_05)
        raise httpx.ReadTimeout("", request=request)

    backend = SlurmRestBackend("https://restd.test", user="goodput", token=TOKEN, timeout_s=8,
                               transport=httpx.MockTransport(hangs))
    with pytest.raises(TransientSchedulerError, match=r"no answer within 8 s \(ReadTimeout\)"):
        await backend.get_job("7")
    await backend.aclose()
