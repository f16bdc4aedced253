"""The console over HTTP, as each kind of caller sees it: no credentials, a viewer, an operator by
session (with and without its CSRF token), an operator by bearer token, and a page on another
origin. Everything runs against the real Temporal dev server and a worker on a fake cluster."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from temporalio.client import Client

from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.console.harness import OPERATOR_TOKEN, VIEWER_TOKEN, Console, served_console
from tests.workflows.helpers import anomaly, inject, result, wait_for_state
from workers.prometheus import Exposition, publish
from workers.telemetry import instruments

pytestmark = pytest.mark.temporal
S = IncidentState
EVIL = "<script>alert('owned')</script>"


async def login(http: httpx.AsyncClient, token: str) -> str:
    """Logs in by the form; the CSRF token of the new session, read from a page."""
    response = await http.post("/login", data={"token": token, "next": "/incidents"})
    assert response.status_code == 303 and "goodput_session" in response.cookies
    page = await http.get("/kill-switch")
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, "every page with a form carries the session's CSRF token"
    return found.group(1)


async def awaiting(client: Client, console: Console, job: str = "1001", evidence: tuple[str, ...] = ()) -> str:
    incident = await inject(client, console.task_queue, anomaly(job, cluster=console.cluster, evidence=evidence),
                            mode=Mode.APPROVE)
    await wait_for_state(client, incident, S.AWAITING_APPROVAL)
    return incident


async def test_without_credentials_every_page_is_401_and_a_browser_gets_the_login_form(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, timeout=30) as http:
        for path in ("/incidents", "/inbox", "/nodes", "/jobs", "/audit", "/goodput", "/kill-switch",
                     "/incidents/stream"):
            response = await http.get(path)
            assert response.status_code == 401, path
        page = await http.get("/incidents")
        assert 'name="token"' in page.text and "log in" in page.text.lower()
        scripted = await http.get("/incidents", headers={"authorization": "Bearer not-a-real-token-at-all"})
        assert scripted.status_code == 401 and scripted.headers["www-authenticate"] == "Bearer"
        forged = await http.post("/kill-switch", data={"action": "on", "reason": "x"})
        assert forged.status_code == 401
        bad = await http.post("/login", data={"token": "guess-guess-guess-guess"})
        assert bad.status_code == 401 and "goodput_session" not in bad.cookies


async def test_a_viewer_reads_but_every_action_is_403(client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, timeout=30) as http:
        incident = await awaiting(client, console)
        csrf = await login(http, VIEWER_TOKEN)
        page = await http.get(f"/incidents/{incident}")
        assert page.status_code == 200 and incident in page.text
        assert 'id="approve"' not in page.text and 'id="cancel"' not in page.text
        assert (await http.get(f"/incidents/{incident}/approve")).status_code == 403
        # A forged POST with the viewer's own valid session and CSRF token: the role decides.
        forged = await http.post(f"/incidents/{incident}/approve", data={"reason": "why not", "csrf_token": csrf})
        assert forged.status_code == 403 and "viewer" in forged.text
        flip = await http.post("/kill-switch", data={"action": "on", "reason": "x", "csrf_token": csrf})
        assert flip.status_code == 403
        assert (await wait_for_state(client, incident, S.AWAITING_APPROVAL)).decision is None
        assert not (await console.ctx.backend.service.kill_switch(console.cluster)).engaged


async def test_an_operator_session_needs_its_csrf_token_and_the_same_origin(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, timeout=30) as http:
        incident = await awaiting(client, console)
        csrf = await login(http, OPERATOR_TOKEN)
        missing = await http.post(f"/incidents/{incident}/approve", data={"reason": "go"})
        assert missing.status_code == 403 and "CSRF" in missing.text
        wrong = await http.post(f"/incidents/{incident}/approve", data={"reason": "go", "csrf_token": csrf[:-2] + "xx"})
        assert wrong.status_code == 403
        other_site = await http.post(f"/incidents/{incident}/approve", data={"reason": "go", "csrf_token": csrf},
                                     headers={"origin": "https://evil.example"})
        assert other_site.status_code == 403
        no_reason = await http.post(f"/incidents/{incident}/approve", data={"reason": "  ", "csrf_token": csrf})
        assert no_reason.status_code == 400 and "reason is required" in no_reason.text
        assert (await wait_for_state(client, incident, S.AWAITING_APPROVAL)).decision is None

        done = await http.post(f"/incidents/{incident}/approve",
                               data={"reason": "xid 79 confirmed by on-call", "csrf_token": csrf})
        assert done.status_code == 303
        report = await result(client, incident)
    assert report.state is S.RECOVERED
    assert report.decision is not None and report.decision.who == "olga"
    assert report.decision.origin == "console 127.0.0.1"
    approvals = [r for r in report.audit if r.action == "approve"]
    assert [(r.actor, r.reason, r.origin) for r in approvals] == [
        ("operator:olga", "xid 79 confirmed by on-call", "console 127.0.0.1")]


async def test_a_tampered_or_foreign_session_cookie_is_not_a_login(client: Client, task_queue: str,
                                                                  tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, timeout=30) as http:
        await login(http, VIEWER_TOKEN)
        cookie = http.cookies["goodput_session"]
        body, _, signature = cookie.rpartition(".")
        import base64
        forged_body = base64.urlsafe_b64encode(
            base64.urlsafe_b64decode(body + "==").replace(b"vera", b"olga")).decode().rstrip("=")
        async with httpx.AsyncClient(base_url=console.url, cookies={"goodput_session": f"{forged_body}.{signature}"}
                                     ) as forged:
            assert (await forged.get("/incidents")).status_code == 401


async def test_an_operator_by_bearer_token_acts_without_csrf_and_job_text_stays_text(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(), timeout=30) as http:
        incident = await awaiting(client, console, evidence=(f"NCCL WARN {EVIL}", "Xid 79 on node2"))
        page = await http.get(f"/incidents/{incident}")
        assert EVIL not in page.text and "&lt;script&gt;" in page.text
        headers = page.headers
        assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
        confirm = await http.get(f"/incidents/{incident}/approve")
        assert "drain node2" in confirm.text and "requeue job 1001" in confirm.text
        cancelled = await http.post(f"/incidents/{incident}/cancel", data={"reason": "maintenance window"})
        assert cancelled.status_code == 303
        assert (await result(client, incident)).state is S.CANCELLED
        again = await http.post(f"/incidents/{incident}/approve", data={"reason": "too late"})
        assert again.status_code == 409 and "cancelled" in again.text


async def test_filters_are_validated_and_a_saved_view_is_a_url(client: Client, task_queue: str,
                                                              tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=30) as http:
        first = await awaiting(client, console, "1001")
        other = await inject(client, task_queue, anomaly("1002", cluster=console.cluster, nodes=("node3",)))
        await result(client, other)
        view = await http.get(f"/incidents?cluster={console.cluster}&state=awaiting-approval")
        assert first in view.text and other not in view.text
        assert "awaiting-approval <b>1</b>" in view.text and "recommended-only <b>1</b>" in view.text
        by_node = await http.get(f"/incidents?cluster={console.cluster}&node=node3")
        assert other in by_node.text and first not in by_node.text
        for hostile in ("node=a' OR 'x'='x", "state=bogus", "job=1;drop", "page_size=100000", "since=yesterday"):
            assert (await http.get(f"/incidents?{hostile}")).status_code == 400, hostile


async def test_kill_switch_by_form_is_audited_with_who_and_where_and_exported_as_csv(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, timeout=30) as http:
        csrf = await login(http, OPERATOR_TOKEN)
        flipped = await http.post("/kill-switch", data={"action": "on", "reason": "storm of drains",
                                                        "csrf_token": csrf})
        assert flipped.status_code == 303
        page = await http.get("/kill-switch")
        assert "ENGAGED" in page.text
        modes = re.findall(r'<td class="effective">([a-z]+)</td>', page.text)
        assert modes == ["monitor", "monitor", "monitor"]  # default, debug, gpu
        for _ in range(50):
            exported = await http.get("/audit?format=csv")
            rows = list(csv.DictReader(io.StringIO(exported.text)))
            if any(r["action"] == "kill-switch-on" for r in rows):
                break
            import asyncio
            await asyncio.sleep(0.1)
        row = next(r for r in rows if r["action"] == "kill-switch-on")
        assert (row["actor"], row["reason"], row["origin"]) == ("operator:olga", "storm of drains",
                                                                "console 127.0.0.1")
        assert exported.headers["content-disposition"].startswith("attachment")


async def test_metrics_are_served_beside_the_console_without_a_login(client: Client, task_queue: str,
                                                                    tmp_path: Path) -> None:
    """Prometheus cannot log in; /metrics carries no job ids, node names or secrets."""
    exposition = Exposition()
    provider = MeterProvider(metric_readers=[exposition.reader])
    instruments(provider.get_meter("test")).detection_latency.record(0.7, {"source": "log", "kind": "crash"})
    publish(exposition)
    try:
        async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
                base_url=console.url, timeout=30) as http:
            response = await http.get("/metrics")
    finally:
        publish(None)
        provider.shutdown()
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    assert 'goodput_detection_latency_seconds_bucket{kind="crash",le="1.0",source="log"} 1.0' in response.text


async def test_every_overview_page_renders_what_happened(client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=30) as http:
        done = await inject(client, task_queue, anomaly("1001", cluster=console.cluster), mode=Mode.AUTONOMOUS)
        assert (await result(client, done)).state is S.RECOVERED
        waiting = await awaiting(client, console, "1002")
        pages = {path: await http.get(path) for path in (
            "/inbox", "/nodes", "/jobs", "/goodput", "/audit", f"/jobs/{console.cluster}/1001/why",
            f"/jobs/{console.cluster}/1002/why", f"/jobs/{console.cluster}/4242/why")}
    assert {path: r.status_code for path, r in pages.items()} == dict.fromkeys(pages, 200)
    assert waiting in pages["/inbox"].text and "requeue job 1002" in pages["/inbox"].text
    assert "node2" in pages["/nodes"].text and "goodput (incident" in pages["/nodes"].text  # who drained it
    assert "1001" in pages["/jobs"].text and "GPU-hours saved" in pages["/goodput"].text
    assert "It did" in pages[f"/jobs/{console.cluster}/1001/why"].text
    assert "Stopped at <b>gate</b>" in pages[f"/jobs/{console.cluster}/1002/why"].text
    assert "Stopped at <b>job seen</b>" in pages[f"/jobs/{console.cluster}/4242/why"].text
    assert "drain" in pages["/audit"].text


async def test_one_node_fault_that_hit_two_jobs_is_shown_as_one(client: Client, task_queue: str,
                                                              tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=30) as http:
        shared = console.fake.snapshot().jobs["1002"]
        console.fake.add_job(shared.model_copy(update={"job_id": "1004", "nodes": ("node3",)}))  # beside 1002
        for job in ("1002", "1004"):
            await result(client, await inject(client, task_queue, anomaly(job, cluster=console.cluster,
                                                                          nodes=("node3",))))
        page = await http.get("/faults")
    rows = re.findall(r"<tr class=\"storm\">(.*?)</tr>", page.text, re.S)
    assert len(rows) == 1 and "node3" in rows[0]
    assert f"<b>2</b>: {console.cluster}/1002, {console.cluster}/1004" in rows[0]
    assert f"<code>node-incident/{console.cluster}/node3</code>" in rows[0]  # one linked fault


async def test_the_trust_page_shows_each_rules_record_and_autonomy(client: Client, task_queue: str,
                                                                   tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=30) as http:
        empty = await http.get("/trust")
        done = await inject(client, task_queue, anomaly("1001", cluster=console.cluster), mode=Mode.AUTONOMOUS)
        assert (await result(client, done)).state is S.RECOVERED
        page = await http.get("/trust")
    assert empty.status_code == page.status_code == 200 and "no recommendation recorded yet" in empty.text
    [row] = re.findall(r"<tr>\s*<td><code>(.*?)</tr>", page.text, re.S)
    cells = re.findall(r"<td>(.*?)</td>", "<td><code>" + row, re.S)
    assert cells[0] == "<code>category:gpu-hardware</code>" and cells[1:8] == ["1", "0", "0", "0", "0", "0", "1"]
    assert "<b>approve</b>" in row and "0 operator decisions, 20 needed" in row
