"""The webhook notifier against a real local HTTP server, and its failure modes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from activities.adapters.notify import FanOutNotifier, WebhookError, WebhookNotifier
from goodput.recover.incident import Notification
from goodput.recover.lifecycle import IncidentState
from tests.fakes.notifier import RecordingNotifier

NOTE = Notification(incident_id="incident-lab-42-0-abcd", state=IncidentState.AWAITING_APPROVAL,
                    summary="approval needed: drain node3, then requeue the job")


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, object]]]]:
    received: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/hook", received
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_posts_slack_text_and_structure(server: tuple[str, list[dict[str, object]]]) -> None:
    url, received = server
    await WebhookNotifier(url, ui_url="http://127.0.0.1:8233").notify(NOTE)
    [body] = received
    assert "awaiting-approval" in str(body["text"]) and "drain node3" in str(body["text"])
    assert "http://127.0.0.1:8233/namespaces/default/workflows/incident-lab-42-0-abcd" in str(body["text"])
    assert body["goodput"] == NOTE.model_dump(mode="json")


async def test_errors_raise_so_the_activity_retries() -> None:
    refused = WebhookNotifier("http://hook", transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")))
    with pytest.raises(WebhookError, match="answered 500"):
        await refused.notify(NOTE)
    down = WebhookNotifier("http://127.0.0.1:9/hook", timeout_s=1)
    with pytest.raises(WebhookError, match="unreachable"):
        await down.notify(NOTE)


async def test_fan_out_tries_everyone_then_raises() -> None:
    local = RecordingNotifier()
    broken = WebhookNotifier("http://hook", transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    with pytest.raises(WebhookError):
        await FanOutNotifier(broken, local).notify(NOTE)
    assert local.sent == [NOTE]


async def test_errors_never_carry_the_webhook_url() -> None:
    # The URL is a credential and activity errors land in workflow history for every UI user.
    secret = "https://hooks.example.test/services/T000/B000/s3cr3t-token"

    def echo_url(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text=f"invalid token for {request.url}")

    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}", request=request)

    for transport in (httpx.MockTransport(echo_url), httpx.MockTransport(fail)):
        with pytest.raises(WebhookError) as caught:
            await WebhookNotifier(secret, transport=transport).notify(NOTE)
        assert "s3cr3t" not in str(caught.value) and "hooks.example.test" in str(caught.value)
        error = caught.value
        assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


async def test_the_webhook_url_never_goes_to_a_proxy_or_gets_netrc_credentials(
        server: tuple[str, list[dict[str, object]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The URL is a credential: a proxy named by the environment would see it in full (and a
    # planted .netrc would add its own Authorization header to what goes out).
    url, received = server
    proxied: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            proxied.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login planted password planted\n")
    netrc.chmod(0o600)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("NETRC", str(netrc))
    try:
        await WebhookNotifier(url).notify(NOTE)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert proxied == [] and len(received) == 1
