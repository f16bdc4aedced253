"""The Scheduler on slurmrestd (in-cluster deployments), with a CLI/SSH fallback for the rest.

Reads (jobs, nodes) and what the served API version can do (hold, release, cancel; drain and
resume from v0.0.39; excluded nodes from v0.0.40; requeue from v0.0.45, Slurm 26.05) go over
HTTP with JWT headers. The version is the newest one both the server advertises in
`/openapi/v3` and goodput parses, and capabilities come from the methods the spec lists.
Resubmission and anything the version lacks go to the fallback backend (SlurmCliBackend locally
or over SSH); without one they fail permanently and say why. The same rules (idempotence,
ownership, opt-in, validation first) apply on both paths.

The client carries a JWT that can act on every job, so it trusts nothing around it: no proxy
variables, .netrc or SSL_CERT_* (trust_env=False; a private CA is passed explicitly), no
`http://` unless the deployment allows it (a loopback slurmrestd), no credentials in the URL,
and the token never in an error message. Answers are read with bounded size and the same JSON
rules as the CLI's (`goodput.slurm.jsonout`): a job is the one whose id matches, never the first
one of a list, and a body of the wrong shape is a SlurmJsonError, not an empty cluster.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import re2

from activities.adapters.slurm_action import act_unless_done, change_node
from goodput.identifiers import validate_job_id, validate_node_name, validate_reason
from goodput.scheduler import (
    ActionResult,
    JobInfo,
    JobStatus,
    NodeInfo,
    PermanentSchedulerError,
    ReservationInfo,
    ResubmitRequest,
    Scheduler,
    SlurmSwitch,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
    status_of,
    statuses_of,
)
from goodput.slurm import restapi, rules
from goodput.slurm.errors import classify, is_pending_execution
from goodput.slurm.jsonout import SlurmJsonError, decode, entries, errors_in, find_job, job_from_json, node_from_json
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in

TokenSource = str | Callable[[], str]
_RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})
MAX_RESPONSE = 256 * 1024 * 1024
MAX_TOKEN = 16 * 1024
# Linear-time (RE2): applied to text the server sent.
_JWT = re2.compile(r"eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*")


def _partitions(node: Mapping[str, Any]) -> set[str]:
    """The partitions a node's JSON entry lists (none when the field is missing or not a list)."""
    listed = node.get("partitions")
    return {p for p in listed[:1024] if isinstance(p, str)} if isinstance(listed, list) else set()


def checked_base_url(base_url: str, *, allow_http: bool = False) -> httpx.URL:
    """The slurmrestd URL, if a token may be sent there: https (http only when allowed), a host,
    no user:password, query or fragment."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise PermanentSchedulerError(f"slurmrestd URL is not a URL: {exc}") from None
    if url.scheme not in ({"https", "http"} if allow_http else {"https"}):
        raise PermanentSchedulerError(f"slurmrestd URL must be https:// (got {url.scheme or 'no'} scheme); "
                                      "plain http:// only with slurm.rest_allow_http")
    if not url.host or url.userinfo or url.query or url.fragment:
        raise PermanentSchedulerError("slurmrestd URL needs a host and no user, password, query or fragment")
    return url


class SlurmRestBackend:
    """Implements `goodput.scheduler.Scheduler` against slurmrestd."""

    def __init__(self, base_url: str, *, user: str, token: TokenSource, fallback: Scheduler | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 30.0,
                 allow_partitions: Collection[str] = (), comment_marker: str = DEFAULT_MARKER,
                 enforce_opt_in: bool = True, allow_http: bool = False, ca_file: Path | None = None,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        url = checked_base_url(base_url, allow_http=allow_http)
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        # trust_env=False: proxies from the environment would see the token, and .netrc would add
        # its own credentials
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(base_url=url, transport=transport, timeout=timeout_s,
                                         follow_redirects=False, trust_env=False, verify=verify)
        self._user = user
        self._token = token
        self._sent_token = ""
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
        close = getattr(self._fallback, "aclose", None)
        if close is not None:
            await close()

    # -- HTTP -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        if (not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN
                or not all("!" <= ch <= "~" for ch in token)):
            raise PermanentSchedulerError("the slurmrestd token is not a JWT (empty, too long, or not "
                                          "printable ASCII without spaces); check slurm.rest_token_file")
        self._sent_token = token
        return {"X-SLURM-USER-NAME": self._user, "X-SLURM-USER-TOKEN": token, "Accept": "application/json"}

    def _redact(self, text: str) -> str:
        """Error text without the token (servers and libraries may echo it), bounded."""
        if self._sent_token:
            text = text.replace(self._sent_token, "[token]")
        return str(_JWT.sub("[token]", text[:1000]))

    async def _send(self, method: str, path: str, body: Mapping[str, Any] | None) -> tuple[int, bytes]:
        request = self._client.build_request(method, path, headers=self._headers(),
                                             json=dict(body) if body is not None else None)
        try:
            response = await self._client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE:
                        raise SlurmJsonError(f"slurmrestd {method} {path}: answer over {MAX_RESPONSE} bytes")
                    chunks.append(chunk)
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:  # httpx's own text is often empty
            raise TransientSchedulerError(self._redact(
                f"slurmrestd {method} {path}: no answer within {self._timeout_s:g} s ({type(exc).__name__})")) from None
        except httpx.TransportError as exc:
            raise TransientSchedulerError(
                self._redact(f"slurmrestd {method} {path}: {type(exc).__name__}: {exc}")) from None
        except httpx.HTTPError as exc:  # an undecodable body, a malformed answer
            raise SlurmJsonError(self._redact(f"slurmrestd {method} {path}: {type(exc).__name__}: {exc}")) from None
        return response.status_code, b"".join(chunks)

    async def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if self._on_request is not None:
            self._on_request(method, path)
        status, raw = await self._send(method, path, body)
        parsed: Any = None
        if raw.strip():
            try:
                parsed = decode(raw)
            except SlurmJsonError as err:
                if status < 400:
                    raise SlurmJsonError(self._redact(f"slurmrestd {method} {path}: {err}")) from None
        if status < 400 and not isinstance(parsed, dict):
            raise SlurmJsonError(f"slurmrestd {method} {path}: the answer is not a JSON object")
        document: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        problems = errors_in(document)
        if status < 400 and not problems:
            return document
        text = self._redact("; ".join(problems) or f"HTTP {status} {raw[:200].decode('utf-8', 'replace')}")
        where = ["slurmrestd", f"{method} {path}"]
        if status in (401, 403):
            raise PermanentSchedulerError(f"slurmrestd refused the credentials for {self._user}: {text}")
        error = classify(where, status, "", text)
        if isinstance(error, UnknownJobError | UnknownNodeError | TransientSchedulerError):
            raise error
        if status in _RETRYABLE_STATUS or status >= 500:
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

    async def can(self, capability: restapi.Capability) -> bool:
        """Whether the negotiated API version offers `capability` (without a fallback)."""
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
        if not await self.can(restapi.Capability.READ):
            return await self._need_fallback("read jobs").get_job(job_id)
        document = await self._request("GET", restapi.job_path(await self.api_version(), job_id))
        # The job with this id, never another one of the list; its output paths as scontrol prints
        # them (22.05's v0.0.38 sends the `%j` patterns), which pushed lines are checked against.
        return find_job(document, job_id, expand_output=True)

    async def job_status(self, job_id: str) -> JobStatus:
        return status_of(await self.get_job(job_id))  # one GET of the job (/job/ID), as get_job

    async def list_jobs(self) -> Sequence[JobInfo]:
        if not await self.can(restapi.Capability.READ):
            return await self._need_fallback("list jobs").list_jobs()
        document = await self._request("GET", restapi.jobs_path(await self.api_version()))
        return [job_from_json(job) for job in entries(document, "jobs")]

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        # slurmrestd answers every job whole; only what is kept narrows
        return statuses_of(await self.list_jobs(), node, user_id)

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        if not await self.can(restapi.Capability.READ):
            return await self._need_fallback("read nodes").get_node(name)
        try:
            document = await self._request("GET", restapi.node_path(await self.api_version(), name))
        except PermanentSchedulerError as err:
            # 23.02+ answers an unknown name with HTTP 200 and "Failure to query node x" / "No error"
            if type(err) is PermanentSchedulerError and "failure to query node" in str(err).lower():
                raise UnknownNodeError(f"unknown node {name}: {err}") from None
            raise
        for node in entries(document, "nodes"):
            info = node_from_json(node)
            if info.name == name:
                return info
        raise UnknownNodeError(f"unknown node {name}")

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        if not await self.can(restapi.Capability.READ):
            return await self._need_fallback("list nodes").list_nodes(partition)
        # slurmrestd's node list takes no partition filter: the whole list comes, filtered here
        wanted = set(partition.split(",")) if partition else None
        document = await self._request("GET", restapi.nodes_path(await self.api_version()))
        return [node_from_json(node) for node in entries(document, "nodes")
                if wanted is None or wanted & _partitions(node)]

    async def list_dead_nodes(self) -> Sequence[NodeInfo]:
        # slurmrestd's node list takes no state filter either: the whole list comes, filtered here
        return [node for node in await self.list_nodes() if node.dead]

    # -- node actions ---------------------------------------------------------------------

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        if not await self.can(restapi.Capability.NODE_UPDATE):
            return await self._need_fallback("update nodes").drain_node(name, reason)
        return await change_node(name, reason, read=self.get_node, noop=rules.drain_noop,
                                 act=lambda: self._update_node(name, drain_reason=reason), done="drained")

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        if not await self.can(restapi.Capability.NODE_UPDATE):
            return await self._need_fallback("update nodes").resume_node(name, reason)
        return await change_node(name, reason, read=self.get_node, noop=rules.resume_noop,
                                 act=lambda: self._update_node(name, drain_reason=None), done="resumed")

    async def _update_node(self, name: str, *, drain_reason: str | None) -> None:
        await self._request("POST", restapi.node_path(await self.api_version(), name),
                            restapi.node_update_body(drain_reason=drain_reason))

    # -- job actions ----------------------------------------------------------------------

    async def _opted_in_job(self, job_id: str) -> JobInfo:
        job = await self.get_job(job_id)
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job_id} has not opted in to goodput (comment marker "
                                  f"{self._marker!r} or an allowlisted partition); not touching it")
        return job

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        del known, fresh  # reads the whole job again: one call, as before
        validate_job_id(job_id)
        job = await self._opted_in_job(job_id)  # refuse here too, whatever the fallback's settings
        if not await self.can(restapi.Capability.JOB_REQUEUE):
            return await self._need_fallback("requeue jobs").requeue_job(job_id, hold=hold)
        if rules.is_requeued(job):
            return await self._already_pending(job, hold)
        try:
            await self._request("GET", restapi.requeue_target(await self.api_version(), job_id, hold=hold))
        except PermanentSchedulerError as err:
            if type(err) is not PermanentSchedulerError or not is_pending_execution(str(err)):
                raise
            # requeued a moment ago (still completing), by us or anyone: done, as with the CLI
            return await self._already_pending(await self.get_job(job_id), hold)
        return ActionResult(changed=True, detail=f"requeued {job_id}{' (held)' if hold else ''}")

    async def _already_pending(self, job: JobInfo, hold: bool) -> ActionResult:
        if hold and not job.held and rules.is_requeued(job):
            await self._update_hold(job.job_id, True)
            return ActionResult(changed=True, detail=f"{job.job_id} was pending; held it")
        return ActionResult(changed=False, detail=f"{job.job_id} already requeued "
                            f"({job.state.value}{', held' if job.held else ''})")

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        validate_job_id(job_id)
        for node in request.exclude:
            validate_node_name(node)
        await self._opted_in_job(job_id)
        return await self._need_fallback("resubmit jobs with exclusions").resubmit_job(job_id, request)

    async def _update_hold(self, job_id: str, hold: bool) -> ActionResult:
        validate_job_id(job_id)
        if not await self.can(restapi.Capability.JOB_UPDATE):
            fallback = self._need_fallback("update jobs")
            await self._opted_in_job(job_id)
            return await (fallback.hold_job(job_id) if hold else fallback.release_job(job_id))
        noop = rules.hold_noop if hold else rules.release_noop
        return await act_unless_done(lambda: self._opted_in_job(job_id), noop,
                                     lambda _: self._job_request("POST", job_id, restapi.hold_body(hold)),
                                     f"{'held' if hold else 'released'} {job_id}")

    async def _job_request(self, method: str, job_id: str, body: Mapping[str, Any] | None = None) -> None:
        await self._request(method, restapi.job_path(await self.api_version(), job_id), body)

    async def hold_job(self, job_id: str) -> ActionResult:
        return await self._update_hold(job_id, True)

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        del known  # REST reads the job in one request, unbatched (docs/slurm.md)
        return await self._update_hold(job_id, False)

    async def exclude_nodes(self, job_id: str, nodes: Sequence[str], *, known: JobInfo | None = None) -> ActionResult:
        del known
        validate_job_id(job_id)
        names = [validate_node_name(n) for n in nodes]
        if not await self.can(restapi.Capability.JOB_EXCLUDE):
            return await self._need_fallback("update excluded nodes").exclude_nodes(job_id, nodes)
        job = await self._opted_in_job(job_id)
        merged = tuple(dict.fromkeys([*job.excluded_nodes, *names]))  # Slurm replaces the list
        if merged == job.excluded_nodes:
            return ActionResult(changed=False, detail=f"job {job_id} already excludes {','.join(names)}")
        await self._job_request("POST", job_id, restapi.exclude_body(merged))
        return ActionResult(changed=True, detail=f"job {job_id} now excludes {','.join(merged)}")

    async def update_dependency(self, job_id: str, dependency: str) -> ActionResult:
        validate_job_id(job_id)
        return await self._need_fallback("update job dependencies").update_dependency(job_id, dependency)

    # slurmrestd has no topology endpoint: the CLI/SSH fallback reads it.
    async def topology(self) -> Sequence[SlurmSwitch]:
        return await self._need_fallback("read the topology").topology()

    # slurmrestd 22.05 (v0.0.36-38) has no reservation updates: the CLI/SSH fallback does them.
    async def get_reservation(self, name: str) -> ReservationInfo:
        return await self._need_fallback("read reservations").get_reservation(name)

    async def allow_reservation_user(self, name: str, user: str) -> ActionResult:
        return await self._need_fallback("update reservations").allow_reservation_user(name, user)

    async def disallow_reservation_user(self, name: str, user: str) -> ActionResult:
        return await self._need_fallback("update reservations").disallow_reservation_user(name, user)

    async def use_reservation(self, job_id: str, name: str) -> ActionResult:
        validate_job_id(job_id)
        await self._opted_in_job(job_id)
        return await self._need_fallback("update job reservations").use_reservation(job_id, name)

    async def add_reservation_nodes(self, name: str, nodes: Sequence[str]) -> ActionResult:
        return await self._need_fallback("update reservations").add_reservation_nodes(name, nodes)

    async def cancel_job(self, job_id: str) -> ActionResult:
        validate_job_id(job_id)
        if not await self.can(restapi.Capability.JOB_CANCEL):
            fallback = self._need_fallback("cancel jobs")
            await self._opted_in_job(job_id)
            return await fallback.cancel_job(job_id)
        return await act_unless_done(lambda: self._opted_in_job(job_id), rules.cancel_noop,
                                     lambda _: self._job_request("DELETE", job_id), f"cancelled {job_id}")
