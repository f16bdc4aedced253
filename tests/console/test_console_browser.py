"""The console in real headless Chromium (Debian's, driven by Playwright): what an operator and a
viewer actually see and can do. With GOODPUT_CONSOLE_SCREENSHOTS=<dir> the tests also save the
screenshots docs/console.md shows."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from temporalio.client import Client

from goodput.models import Category, Mode
from goodput.recover.lifecycle import IncidentState
from tests.console.harness import OPERATOR_TOKEN, VIEWER_TOKEN, served_console
from tests.required import unavailable
from tests.workflows.helpers import anomaly, inject, result, wait_for_state

pytestmark = [pytest.mark.temporal, pytest.mark.browser]
S = IncidentState
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What the machine's closed network needs: no background fetches, no sandbox as root.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.fixture(scope="module", autouse=True)
def _chromium() -> None:
    if not Path(CHROMIUM).exists():
        unavailable("chromium is not installed (scripts/install-console-tools.sh)")  # CI installs it


@asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield chromium
        finally:
            await chromium.close()


async def logged_in(chromium: Browser, url: str, token: str) -> Page:
    page = await chromium.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(f"{url}/login")
    await page.fill("input[name=token]", token)
    await page.click("button.primary")
    await page.wait_for_url("**/incidents")
    return page


async def shot(page: Page, name: str) -> None:
    target = os.environ.get("GOODPUT_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


async def test_an_injected_incident_appears_without_reload_and_an_operator_approves_it(
        client: Client, task_queue: str, tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, browser() as chromium:
        page = await logged_in(chromium, console.url, OPERATOR_TOKEN)
        await page.goto(f"{console.url}/incidents?cluster={console.cluster}")
        await expect(page.locator("#live")).to_have_class("live on")
        await page.evaluate("window.__not_reloaded = true")

        warm = anomaly("1003", cluster=console.cluster, nodes=("node4",), category=Category.APP_ERROR)
        await result(client, await inject(client, task_queue, warm))  # a finished one, for the picture
        incident = await inject(client, task_queue, anomaly("1001", cluster=console.cluster, evidence=(XID,)),
                                mode=Mode.APPROVE)
        row = page.locator(f"tr[data-incident='{incident}']")
        await expect(row).to_contain_text("awaiting-approval", timeout=20_000)
        assert await page.evaluate("window.__not_reloaded") is True  # the same page, updated live
        await shot(page, "incidents")

        await row.locator("a").first.click()
        await expect(page.locator("#incident-state")).to_have_text("awaiting-approval")
        await shot(page, "incident")
        await page.click("#approve")
        await expect(page.locator("#effects")).to_contain_text("drain node2")
        await expect(page.locator("#effects")).to_contain_text("requeue job 1001")
        await page.fill("textarea[name=reason]", "xid 79 confirmed by on-call")
        await shot(page, "approve")
        await page.click("#confirm")
        await wait_for_state(client, incident, S.RECOVERED)
        await page.reload()
        await expect(page.locator("#incident-state")).to_have_text("recovered")
        await expect(page.locator(".decision")).to_contain_text("olga")
        await shot(page, "recovered")
    assert [e.op for e in console.fake.journal()][:2] == ["drain", "requeue"]


async def test_a_viewer_sees_no_buttons_and_a_forged_post_is_403(client: Client, task_queue: str,
                                                                 tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, browser() as chromium:
        incident = await inject(client, task_queue, anomaly("1001", cluster=console.cluster), mode=Mode.APPROVE)
        await wait_for_state(client, incident, S.AWAITING_APPROVAL)
        page = await logged_in(chromium, console.url, VIEWER_TOKEN)
        await page.goto(f"{console.url}/incidents/{incident}")
        await expect(page.locator("#incident-state")).to_have_text("awaiting-approval")
        assert await page.locator("#approve, #cancel, button.danger, button.primary").count() == 0
        await page.goto(f"{console.url}/kill-switch")
        assert await page.locator("#flip").count() == 0
        # The viewer's browser, with its session cookie, posts what the operator's form would.
        status = await page.evaluate(
            """async (id) => (await fetch(`/incidents/${id}/approve`, {method: 'POST',
                 headers: {'content-type': 'application/x-www-form-urlencoded'},
                 body: 'reason=forged'})).status""", incident)
        assert status == 403
        await page.goto(f"{console.url}/incidents/{incident}/approve")
        await expect(page.locator("h1")).to_have_text("403 Forbidden")
        await shot(page, "forbidden")
        assert (await wait_for_state(client, incident, S.AWAITING_APPROVAL)).decision is None


async def test_the_kill_switch_flips_every_partition_to_monitor_and_back(client: Client, task_queue: str,
                                                                       tmp_path: Path) -> None:
    async with served_console(client, task_queue, tmp_path) as console, browser() as chromium:
        page = await logged_in(chromium, console.url, OPERATOR_TOKEN)
        await page.goto(f"{console.url}/kill-switch")
        effective = page.locator("#partition-modes td.effective")
        await expect(effective).to_have_text(["monitor", "approve", "autonomous"])  # default, debug, gpu
        await page.fill("textarea[name=reason]", "storm of drains after the switch firmware update")
        await page.click("#flip")
        await expect(page.locator("#switch-state")).to_have_text("ENGAGED")
        await expect(effective).to_have_text(["monitor", "monitor", "monitor"])
        await shot(page, "kill-switch")
        assert (await console.ctx.backend.service.kill_switch(console.cluster)).engaged
        await page.fill("textarea[name=reason]", "firmware rolled back")
        await page.click("#flip")
        await expect(page.locator("#switch-state")).to_have_text("released")
        await expect(effective).to_have_text(["monitor", "approve", "autonomous"])
