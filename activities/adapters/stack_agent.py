"""The node agent's side of the stack captures an incident asks for: take the request from the
heartbeat's response, capture, POST the result to `/v1/stacks`.

No connection ever comes into the node: the service's answer to the agent's own heartbeat lists the
requests for this node (the service chose them by the node the token proves). Each names a request
id and a job id, nothing else; the capture itself (`activities.adapters.stack_dump`) dumps only the
processes `scontrol listpids` lists for that job on this node, so a request can make the agent act
on nothing but the job's own processes here. Requests are taken once each (their ids remembered,
bounded), one capture runs at a time in a thread (py-spy calls have their own timeouts), and the
result is cut to what the service accepts before it is sent; a failed POST is retried a few times
(the service takes a repeat as a duplicate), then given up: the incident records "no answer".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections import OrderedDict
from collections.abc import Callable

import httpx
from pydantic import ValidationError

from activities.adapters.heartbeat import AgentPoster, PostCounts
from activities.adapters.stack_dump import StackDumper, StackReport
from goodput.detect.stack_requests import (
    MAX_DUMP_CHARS,
    MAX_DUMPS,
    MAX_PENDING_PER_NODE,
    MAX_REASON_CHARS,
    MAX_REASONS,
    MAX_RESULT_BYTES,
    NodeStacks,
    PendingStack,
    cut,
)

log = logging.getLogger("goodput.agent")
STACKS_PATH = "/v1/stacks"
MAX_REMEMBERED = 1024
POST_ATTEMPTS = 3
# JSON escapes can double a dump's size; the sum of the dumps stays well inside the service's bound.
_DUMP_BUDGET = MAX_RESULT_BYTES // 3


def to_result(request: PendingStack, report: StackReport) -> NodeStacks:
    """What the service accepts: at most MAX_DUMPS dumps, each cut, their sum within the budget."""
    dumps: dict[int, str] = {}
    left = _DUMP_BUDGET
    for pid, text in list(report.dumps.items())[:MAX_DUMPS]:
        if left <= 100:
            break
        dumps[pid] = cut(text, min(MAX_DUMP_CHARS, left))
        left -= len(dumps[pid])
    skipped = tuple(cut(f"pid {c.pid}: {c.reason}", MAX_REASON_CHARS) for c in report.skipped[:MAX_REASONS])
    return NodeStacks(request_id=request.id, job_id=request.job_id, dumps=dumps, signalled=report.signalled[:4096],
                      signal_name=report.signal_name[:16], skipped=skipped, error=cut(report.error, MAX_REASON_CHARS))


class StackResponder(PostCounts):
    """Takes the `stacks` of each heartbeat response; `close()` cancels what is still running."""

    def __init__(self, url: str, token: str, *, cluster: str, node: str,
                 capture: Callable[[str], StackReport] | None = None, timeout_s: float = 10.0) -> None:
        """`capture` None: the real one (py-spy when installed, else the signal the job asks for)."""
        self._poster = AgentPoster(url, STACKS_PATH, token, what="stack result")
        self._cluster, self._node = cluster, node
        self._capture = capture or StackDumper(py_spy=shutil.which("py-spy"), node=node).capture
        self._timeout_s = timeout_s
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._one_at_a_time = asyncio.Semaphore(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, response: object) -> None:
        """The heartbeat's response body; anything but a list of well-formed requests is ignored."""
        listed = response.get("stacks") if isinstance(response, dict) else None
        if not isinstance(listed, list):
            return
        for raw in listed[:MAX_PENDING_PER_NODE]:
            try:
                request = PendingStack.model_validate(raw)
            except ValidationError:
                continue
            if request.id in self._seen:
                continue
            self._seen[request.id] = None
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
            task = asyncio.create_task(self._answer(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Until every capture taken so far has been sent or given up (tests)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _answer(self, request: PendingStack) -> None:
        async with self._one_at_a_time:
            try:
                report = await asyncio.to_thread(self._capture, request.job_id)
            except Exception as err:  # the capture's own failures are report lines; this is a bug's
                report = StackReport(request.job_id, error=f"capture failed: {type(err).__name__}: {err}"[:200])
        body = {"cluster": self._cluster, "node": self._node,
                "result": to_result(request, report).model_dump(mode="json")}
        log.info("stacks for job %s (request %s): %d dump(s), %d signalled", request.job_id, request.id,
                 len(report.dumps), len(report.signalled))
        async with httpx.AsyncClient(timeout=self._timeout_s, trust_env=False) as session:
            for attempt in range(POST_ATTEMPTS):
                if await self._poster.post(session, body) is not None:
                    return
                status = self._poster.last_status
                if status is not None and status < 500:  # refused for good (expired, not ours): no retry
                    return
                await asyncio.sleep(1.0 + attempt)
