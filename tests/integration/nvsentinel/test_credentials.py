"""The NVSentinel receivers' credentials, served: no receiver listens without one, the HTTP side
refuses an unauthenticated loopback POST, OAuth client credentials (secret in the settings or in a
file) for the event exporter, and TokenReview of projected ServiceAccount tokens for gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelSettings
from tests.fakes.sink import RecordingSink
from tests.integration.nvsentinel.cases import CE_HEADERS, batch, caller, cloudevent, fresh, status_of, xid_proto
from workers.http_site import Listener, application
from workers.nvsentinel.server import serve_nvsentinel


async def test_a_receiver_without_a_credential_does_not_listen(sink: RecordingSink) -> None:
    """Settings that slipped past validation (built in code, an old file) still do not start a
    receiver anyone on the host could feed: the servers refuse before binding."""
    settings = NvSentinelSettings.model_construct(enabled=True, grpc_port=0, http_port=0)
    with pytest.raises(ValueError, match="credential"):
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab"):
            pass
    assert sink.anomalies == []


async def test_an_unauthenticated_loopback_post_is_refused_and_opens_nothing(tmp_path: Path,
                                                                             sink: RecordingSink) -> None:
    """The issue's case: gRPC uses TokenReview, the HTTP side was left open to every local account.
    Now the HTTP side needs its own credential, and a loopback POST without one is a 401."""
    secret = "exporter-secret-0123456789"
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0, oauth_clients={"nvsentinel": secret})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None and running.http.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(running.http.url, content=cloudevent(fresh()),
                                         headers={"Content-Type": "application/cloudevents+json"})
            forged = await client.post(running.http.url, content=cloudevent(fresh()),
                                       headers={"Content-Type": "application/cloudevents+json",
                                                "Authorization": "Bearer nvsentinel.99999999999." + "0" * 64})
    assert response.status_code == 401 and forged.status_code == 401
    assert sink.anomalies == []


async def test_the_exporter_gets_a_token_by_client_credentials_and_posts_with_it(sink: RecordingSink) -> None:
    """NVSentinel's event exporter always authenticates with OAuth 2.0 client credentials: goodput is
    its token endpoint as well as its sink."""
    secret = "exporter-secret-0123456789"
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0, oauth_clients={"nvsentinel": secret})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None
        token_url, url = running.http.token_url, running.http.url
        async with httpx.AsyncClient(timeout=10) as client:
            unauthenticated = await client.post(url, content=cloudevent(fresh()), headers=CE_HEADERS)
            assert unauthenticated.status_code == 401  # a static token is not one either
            granted = await client.post(token_url, data={"grant_type": "client_credentials", "scope": "events:write"},
                                        auth=("nvsentinel", secret))
            assert granted.status_code == 200 and granted.headers["Cache-Control"] == "no-store"
            answer = granted.json()
            assert answer["token_type"] == "Bearer" and answer["expires_in"] == 3600
            assert answer["scope"] == "events:write" and secret not in answer["access_token"]
            bearer = {"Authorization": f"Bearer {answer['access_token']}",
                      "Content-Type": "application/cloudevents+json"}
            response = await client.post(url, content=cloudevent(fresh()), headers=bearer)
            assert response.status_code == 200 and response.json()["outcome"] == "incident"
            # the client secret in the form instead of HTTP Basic
            posted = await client.post(token_url, data={"grant_type": "client_credentials", "client_id": "nvsentinel",
                                                        "client_secret": secret})
            assert posted.status_code == 200
            refused = await client.post(token_url, data={"grant_type": "client_credentials"},
                                        auth=("nvsentinel", "not-the-secret-at-all"))
            assert refused.status_code == 401 and refused.json() == {"error": "invalid_client"}
            wrong_grant = await client.post(token_url, data={"grant_type": "password"}, auth=("nvsentinel", secret))
            assert wrong_grant.status_code == 400 and wrong_grant.json()["error"] == "unsupported_grant_type"
            huge = await client.post(token_url, content=b"a=" + b"x" * 10_000,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert huge.status_code == 413
            forged = answer["access_token"][:-4] + "0000"
            rejected = await client.post(url, content=cloudevent(fresh()),
                                         headers={**bearer, "Authorization": f"Bearer {forged}"})
            assert rejected.status_code == 401
    assert [a.job_id for a in sink.anomalies] == ["1001"]


SA_USER = "system:serviceaccount:nvsentinel:platform-connector"


@asynccontextmanager
async def kubernetes_api(reviews: list[dict[str, Any]], *, down: bool = False) -> AsyncIterator[str]:
    """The TokenReview endpoint of a Kubernetes API server, as far as goodput uses it."""
    tokens = {"projected-sa-token-of-the-connector": SA_USER, "projected-sa-token-of-someone-else":
              "system:serviceaccount:default:default"}

    async def review(request: Request) -> JSONResponse:
        if down:
            return JSONResponse({"kind": "Status", "code": 503}, status_code=503)
        assert request.headers["Authorization"] == "Bearer goodput-own-sa-token"
        body = await request.json()
        reviews.append(body)
        user = tokens.get(body["spec"]["token"])
        status: dict[str, Any] = {"authenticated": True, "user": {"username": user},
                                  "audiences": body["spec"].get("audiences", [])} if user else {
            "authenticated": False, "error": "invalid bearer token"}
        return JSONResponse({**body, "status": status}, status_code=201)

    app = application([Route("/apis/authentication.k8s.io/v1/tokenreviews", review, methods=["POST"])])
    listener = Listener(app, "Kubernetes API", "127.0.0.1", 0)
    await listener.start()
    try:
        yield listener.url
    finally:
        await listener.stop()


async def test_projected_serviceaccount_tokens_are_checked_by_tokenreview(tmp_path: Path,
                                                                         sink: RecordingSink) -> None:
    """NVSentinel's grpc sink sends a projected ServiceAccount token (its `tokenPath`); goodput asks the
    API server's TokenReview who it belongs to, and caches the answer."""
    (tmp_path / "sa-token").write_text("goodput-own-sa-token\n")
    reviews: list[dict[str, Any]] = []
    async with kubernetes_api(reviews) as api:
        settings = NvSentinelSettings(enabled=True, grpc_port=0, http_enabled=False, token_review={
            "enabled": True, "api_url": api, "allow_http": True, "token_file": tmp_path / "sa-token",
            "allowed_users": [SA_USER], "audiences": ["goodput"]})
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
            assert running.grpc is not None
            async with grpc.aio.insecure_channel(running.grpc.target) as open_channel:
                connector = (("authorization", "Bearer projected-sa-token-of-the-connector"),)
                await caller(open_channel)(batch(xid_proto("node1")), metadata=connector, timeout=10)
                await caller(open_channel)(batch(xid_proto("node3")), metadata=connector, timeout=10)
                for metadata in ((("authorization", "Bearer projected-sa-token-of-someone-else"),),
                                 (("authorization", "Bearer forged"),), ()):
                    assert await status_of(caller(open_channel)(batch(xid_proto("node5")), metadata=metadata,
                                                                timeout=10)) is grpc.StatusCode.UNAUTHENTICATED
    assert [a.job_id for a in sink.anomalies] == ["1001", "1002"]
    assert len(reviews) == 3  # the connector's token was reviewed once, then cached
    assert reviews[0]["spec"] == {"token": "projected-sa-token-of-the-connector", "audiences": ["goodput"]}


async def test_an_unreachable_api_server_asks_nvsentinel_to_retry(tmp_path: Path, sink: RecordingSink) -> None:
    (tmp_path / "sa-token").write_text("goodput-own-sa-token")
    async with kubernetes_api([], down=True) as api:
        settings = NvSentinelSettings(enabled=True, grpc_port=0, http_enabled=False, token_review={
            "enabled": True, "api_url": api, "allow_http": True, "token_file": tmp_path / "sa-token",
            "allowed_users": [SA_USER]})
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
            assert running.grpc is not None
            async with grpc.aio.insecure_channel(running.grpc.target) as open_channel:
                metadata = (("authorization", "Bearer projected-sa-token-of-the-connector"),)
                assert await status_of(caller(open_channel)(batch(xid_proto()), metadata=metadata, timeout=10)) is (
                    grpc.StatusCode.UNAVAILABLE)
    assert sink.anomalies == []



async def test_an_oauth_client_secret_from_a_file_works_like_one_in_the_settings(tmp_path: Path,
                                                                                 sink: RecordingSink) -> None:
    """The Helm chart's way (issue #26): the secret in a mounted Secret's file, never in the ConfigMap."""
    secret = "exporter-secret-from-a-file-0123"
    (tmp_path / "client-secret").write_text(secret + "\n")
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0,
                                  oauth_client_files={"nvsentinel": tmp_path / "client-secret"})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None and "OAuth token URL" in running.describe()
        async with httpx.AsyncClient(timeout=10) as client:
            granted = await client.post(running.http.token_url, data={"grant_type": "client_credentials"},
                                        auth=("nvsentinel", secret))
            bearer = {"Authorization": f"Bearer {granted.json()['access_token']}",
                      "Content-Type": "application/cloudevents+json"}
            response = await client.post(running.http.url, content=cloudevent(fresh()), headers=bearer)
    assert response.status_code == 200 and [a.job_id for a in sink.anomalies] == ["1001"]
