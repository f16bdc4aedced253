"""The Scheduler on slurmrestd (in-cluster deployments), with a CLI/SSH fallback for the rest.

Reads (jobs, nodes) and what the served API version can do (hold, release, cancel; drain and
resume from v0.0.39) go over HTTP with JWT headers. The version is the newest one both the
server advertises in `/openapi/v3` and goodput parses, and capabilities come from the methods the
spec lists. Requeue, resubmission with exclusions, and anything the version lacks go to the
fallback backend (SlurmCliBackend locally or over SSH); without one they fail permanently and
say why. The same rules (idempotence, ownership, opt-in, validation first) apply on both paths.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import httpx

from goodput.identifiers import validate_job_id, validate_node_name, validate_reason
from goodput.scheduler import (
    ActionResult,
    JobInfo,
    NodeInfo,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm import restapi, rules
from goodput.slurm.errors import classify
from goodput.slurm.jsonout import errors_in, job_from_json, node_from_json
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in

TokenSource = str | Callable[[], str]
_RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})


class SlurmRestBackend:
    """Implements `goodput.scheduler.Scheduler` against slurmrestd."""

    def __init__(self, base_url: str, *, user: str, token: TokenSource, fallback: Scheduler | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 30.0,
                 allow_partitions: Collection[str] = (), comment_marker: str = DEFAULT_MARKER,
                 enforce_opt_in: bool = True,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        self._client = httpx.AsyncClient(base_url=base_url, transport=transport, timeout=timeout_s,
                                         follow_redirects=False)
        self._user = user
        self._token = token
        self._fallback = fallback
        self._allow_partitions = frozenset(allow_partitions)
        self._marker = comment_marker
        self._enforce_opt_in = enforce_opt_in
        self._on_request = on_request
        self._version: str | None = None
        self._capabilities: frozenset[restapi.Capability] = frozenset()
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- HTTP -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        return {"X-SLURM-USER-NAME": self._user, "X-SLURM-USER-TOKEN": token,
                "Accept": "application/json"}

    async def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if self._on_request is not None:
            self._on_request(method, path)
        try:
            response = await self._client.request(method, path, headers=self._headers(),
                                                  json=dict(body) if body is not None else None)
        except httpx.TransportError as exc:
            raise TransientSchedulerError(f"slurmrestd {method} {path}: {type(exc).__name__}: {exc}") from None
        try:
            document = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            document = None
        if not isinstance(document, dict):
            document = {}
        problems = errors_in(document)
        if response.status_code < 400 and not problems:
            return document
        text = "; ".join(problems) or f"HTTP {response.status_code} {response.text[:200]}"
        where = ["slurmrestd", f"{method} {path}"]
        if response.status_code in (401, 403):
            raise PermanentSchedulerError(f"slurmrestd refused the credentials for {self._user}: {text}")
        error = classify(where, response.status_code, "", text)
        if isinstance(error, UnknownJobError | UnknownNodeError | TransientSchedulerError):
            raise error
        if response.status_code in _RETRYABLE_STATUS or response.status_code >= 500:
            raise TransientSchedulerError(f"slurmrestd {method} {path}: {text}")
        raise error

    async def api_version(self) -> str:
        """The negotiated version (`v0.0.38`); read once from the server's OpenAPI document."""
        async with self._lock:
            if self._version is None:
                spec = await self._request("GET", "/openapi/v3")
                self._version = restapi.choose_version(spec)
                self._capabilities = restapi.capabilities(spec, self._version)
            return self._version

    async def _can(self, capability: restapi.Capability) -> bool:
        await self.api_version()
        return capability in self._capabilities

    def _need_fallback(self, operation: str) -> Scheduler:
        if self._fallback is None:
            raise PermanentSchedulerError(f"slurmrestd {self._version or ''} cannot {operation}; "
                                          "configure a CLI or SSH fallback backend")
        return self._fallback

    # -- queries --------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobInfo:
        validate_job_id(job_id)
        if not await self._can(restapi.Capability.READ):
            return await self._need_fallback("read jobs").get_job(job_id)
        jobs = (await self._request("GET", restapi.job_path(await self.api_version(), job_id))).get("jobs") or []
        for job in jobs:
            info = job_from_json(job)
            if info.job_id == job_id:
                return info
        if jobs:
            return job_from_json(jobs[0])
        raise UnknownJobError(f"unknown job {job_id}")

    async def list_jobs(self) -> Sequence[JobInfo]:
        if not await self._can(restapi.Capability.READ):
            return await self._need_fallback("list jobs").list_jobs()
        document = await self._request("GET", restapi.jobs_path(await self.api_version()))
        return [job_from_json(job) for job in document.get("jobs") or []]

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        if not await self._can(restapi.Capability.READ):
            return await self._need_fallback("read nodes").get_node(name)
        document = await self._request("GET", restapi.node_path(await self.api_version(), name))
        for node in document.get("nodes") or []:
            info = node_from_json(node)
            if info.name == name:
                return info
        raise UnknownNodeError(f"unknown node {name}")

    async def list_nodes(self) -> Sequence[NodeInfo]:
        if not await self._can(restapi.Capability.READ):
            return await self._need_fallback("list nodes").list_nodes()
        document = await self._request("GET", restapi.nodes_path(await self.api_version()))
        return [node_from_json(node) for node in document.get("nodes") or []]

    # -- node actions ---------------------------------------------------------------------

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        if not await self._can(restapi.Capability.NODE_UPDATE):
            return await self._need_fallback("update nodes").drain_node(name, reason)
        noop = rules.drain_noop(await self.get_node(name), reason)
        if noop is not None:
            return noop
        await self._request("POST", restapi.node_path(await self.api_version(), name),
                            restapi.node_update_body(drain_reason=reason))
        return ActionResult(changed=True, detail=f"drained {name}")

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        if not await self._can(restapi.Capability.NODE_UPDATE):
            return await self._need_fallback("update nodes").resume_node(name, reason)
        noop = rules.resume_noop(await self.get_node(name), reason)
        if noop is not None:
            return noop
        await self._request("POST", restapi.node_path(await self.api_version(), name),
                            restapi.node_update_body(drain_reason=None))
        return ActionResult(changed=True, detail=f"resumed {name}")

    # -- job actions ----------------------------------------------------------------------

    async def _opted_in_job(self, job_id: str) -> JobInfo:
        job = await self.get_job(job_id)
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job_id} has not opted in to goodput (comment marker "
                                  f"{self._marker!r} or an allowlisted partition); not touching it")
        return job

    async def requeue_job(self, job_id: str, *, hold: bool = False) -> ActionResult:
        validate_job_id(job_id)
        await self._opted_in_job(job_id)  # refuse here too, whatever the fallback's settings
        return await self._need_fallback("requeue jobs").requeue_job(job_id, hold=hold)

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        validate_job_id(job_id)
        for node in request.exclude:
            validate_node_name(node)
        await self._opted_in_job(job_id)
        return await self._need_fallback("resubmit jobs with exclusions").resubmit_job(job_id, request)

    async def _update_hold(self, job_id: str, hold: bool) -> ActionResult:
        validate_job_id(job_id)
        if not await self._can(restapi.Capability.JOB_UPDATE):
            fallback = self._need_fallback("update jobs")
            await self._opted_in_job(job_id)
            return await (fallback.hold_job(job_id) if hold else fallback.release_job(job_id))
        job = await self._opted_in_job(job_id)
        noop = rules.hold_noop(job) if hold else rules.release_noop(job)
        if noop is not None:
            return noop
        await self._request("POST", restapi.job_path(await self.api_version(), job_id), restapi.hold_body(hold))
        return ActionResult(changed=True, detail=f"{'held' if hold else 'released'} {job_id}")

    async def hold_job(self, job_id: str) -> ActionResult:
        return await self._update_hold(job_id, True)

    async def release_job(self, job_id: str) -> ActionResult:
        return await self._update_hold(job_id, False)

    async def cancel_job(self, job_id: str) -> ActionResult:
        validate_job_id(job_id)
        if not await self._can(restapi.Capability.JOB_CANCEL):
            fallback = self._need_fallback("cancel jobs")
            await self._opted_in_job(job_id)
            return await fallback.cancel_job(job_id)
        noop = rules.cancel_noop(await self._opted_in_job(job_id))
        if noop is not None:
            return noop
        await self._request("DELETE", restapi.job_path(await self.api_version(), job_id))
        return ActionResult(changed=True, detail=f"cancelled {job_id}")
