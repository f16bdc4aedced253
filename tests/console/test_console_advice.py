"""The console's Checkpoint interval page over HTTP: linked from the incident, shown to a viewer,
computed from the job's real checkpoint tree, the incidents and the fake scheduler, its job-owned
text escaped, and a page (not an error) when it cannot be computed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from goodput.checkpoints.job_advice import JobAdvice
from goodput.models import Mode
from goodput.scheduler import JobInfo, JobState
from tests.console.harness import VIEWER_TOKEN, served_console
from tests.unit.test_checkpoint_job_advice import generic_tree
from tests.workflows.helpers import anomaly, inject, result
from workers.console import advice as advice_page

pytestmark = pytest.mark.temporal


async def test_a_viewer_sees_the_jobs_interval_from_what_goodput_measured(client: Client, task_queue: str,
                                                                         tmp_path: Path) -> None:
    tree = generic_tree(tmp_path / "ckpt<svg>")  # the job names its tree: its text stays text
    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=60) as http:
        console.fake.add_job(JobInfo(job_id="7001", state=JobState.RUNNING, partition="gpu", nodes=("node7", "node8"),
                                     comment=f"goodput:opt-in goodput:ckpt=generic:{tree}", user="alice",
                                     user_id=os.getuid(), group_id=os.getgid()))
        ours = anomaly("7001", cluster=console.cluster, nodes=("node7",)).model_copy(update={"step_time_s": 2.0})
        incident = await inject(client, task_queue, ours, mode=Mode.MONITOR)
        other = await inject(client, task_queue, anomaly("1002", cluster=console.cluster, nodes=("node3",)),
                             mode=Mode.MONITOR)
        for done in (incident, other):
            await result(client, done)
        linked = await http.get(f"/incidents/{incident}")
        page = await http.get(f"/jobs/{console.cluster}/7001/advice")
        unknown = await http.get(f"/jobs/{console.cluster}/4242/advice")
        elsewhere = await http.get("/jobs/othercluster/7001/advice")
        async with httpx.AsyncClient(base_url=console.url) as stranger:
            anonymous = await stranger.get(f"/jobs/{console.cluster}/7001/advice")
    assert f'href="/jobs/{console.cluster}/7001/advice"' in linked.text
    assert page.status_code == 200, page.text
    text = page.text
    assert 'id="advice-answer"' in text and "Checkpoint every <b>" in text
    assert "2 node fault(s) in 30.0 days on 8 nodes" in text and "x 2 node(s) of the job" in text
    assert "the step time its last incident recorded" in text and "gres of its 2 node(s)" in text
    assert "3 found" in text and "ckpt&lt;svg&gt;" in text and "<svg>" not in text
    assert "<script>" not in text  # CSP: no inline script
    assert unknown.status_code == 200 and "No advice: job 4242" in unknown.text
    assert elsewhere.status_code == 200 and "this console watches cluster" in elsewhere.text
    assert anonymous.status_code == 401


async def test_a_slow_or_failing_computation_is_a_page_that_says_so(client: Client, task_queue: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async def slow(*_: object) -> JobAdvice:
        await asyncio.sleep(1)  # past the page's limit; it finishes before the console stops
        raise RuntimeError("late")

    async def broken(*_: object) -> JobAdvice:
        raise RuntimeError("a source did something unexpected")

    async with served_console(client, task_queue, tmp_path) as console, httpx.AsyncClient(
            base_url=console.url, headers=console.bearer(VIEWER_TOKEN), timeout=30) as http:
        monkeypatch.setattr(advice_page, "TIMEOUT_S", 0.2)
        monkeypatch.setattr(advice_page, "_compute", slow)
        timed_out = await http.get(f"/jobs/{console.cluster}/1001/advice")
        monkeypatch.setattr(advice_page, "_compute", broken)
        failed = await http.get(f"/jobs/{console.cluster}/1002/advice")
        await asyncio.sleep(1)
    assert timed_out.status_code == 200 and "not computed within 0.2 s" in timed_out.text
    assert failed.status_code == 200 and "could not be computed: RuntimeError" in failed.text
