"""slurmrestd 24.11 and 26.05 as recorded on the lab: what goodput negotiates and sends natively.

The answers are real (tests/fixtures/slurm/<version>/rest-*.json, openapi-paths-*.json, recorded
from the labs inside Debian roots); the server replaying them is scripted. Every backend here has
no fallback, so an operation that silently left REST would fail the test.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.scheduler import JobState, PermanentSchedulerError, UnknownJobError, UnknownNodeError
from goodput.slurm import restapi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
Cap = restapi.Capability


def recorded(version: str, name: str) -> Any:
    return json.loads((FIXTURES / version / f"{name}-{version}.json").read_text())


def spec(version: str) -> Any:
    return recorded(version, "openapi-paths")


def job_id_in(version: str, name: str) -> str:
    return str(recorded(version, name)["jobs"][0]["job_id"])


def test_24_11_negotiates_v0_0_42_and_reads_updates_and_excludes_over_rest() -> None:
    version = restapi.choose_version(spec("24.11"))
    assert version == "v0.0.42"
    # its collection paths end in "/" (`/slurm/v0.0.42/jobs/`): still the paths goodput reads
    assert restapi.capabilities(spec("24.11"), version) == {
        Cap.READ, Cap.JOB_UPDATE, Cap.JOB_CANCEL, Cap.NODE_UPDATE, Cap.JOB_EXCLUDE}


def test_26_05_negotiates_v0_0_45_which_can_requeue() -> None:
    version = restapi.choose_version(spec("26.05"))
    assert version == "v0.0.45"
    assert restapi.capabilities(spec("26.05"), version) == {
        Cap.READ, Cap.JOB_UPDATE, Cap.JOB_CANCEL, Cap.NODE_UPDATE, Cap.JOB_EXCLUDE, Cap.JOB_REQUEUE}
    # 26.05 still serves v0.0.42, which cannot requeue: the capability is per version
    assert Cap.JOB_REQUEUE not in restapi.capabilities(spec("26.05"), "v0.0.42")


class Recorded:
    """slurmrestd answering from the recordings; every request is kept (method, path?query, body)."""

    def __init__(self, version: str, routes: dict[tuple[str, str], tuple[int, str]]) -> None:
        self.version = version
        self.routes = routes
        self.seen: list[tuple[str, str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        target = request.url.path + (f"?{request.url.query.decode()}" if request.url.query else "")
        self.seen.append((request.method, target, json.loads(request.content) if request.content else None))
        if (request.method, target) == ("GET", "/openapi/v3"):
            return httpx.Response(200, json=spec(self.version))
        status, name = self.routes[(request.method, target)]
        return httpx.Response(status, json=recorded(self.version, name))

    def backend(self) -> SlurmRestBackend:
        return SlurmRestBackend("http://127.0.0.1:6820", user="root", token="jwt-token", allow_http=True,
                                transport=httpx.MockTransport(self.handler))

    def writes(self) -> list[tuple[str, str, Any]]:
        return [s for s in self.seen if s[0] != "GET" or "/requeue" in s[1]]


async def test_26_05_requeue_hold_goes_over_rest_and_a_second_one_is_a_no_op() -> None:
    job = job_id_in("26.05", "rest-job-running")
    base = "/slurm/v0.0.45/job/" + job
    server = Recorded("26.05", {("GET", base): (200, "rest-job-running"),
                                ("GET", f"{base}/requeue?Hold"): (200, "rest-job-requeue-hold")})
    backend = server.backend()
    assert (await backend.requeue_job(job, hold=True)).changed
    assert server.writes() == [("GET", f"{base}/requeue?Hold", None)]
    # the job still runs as far as this read says, but Slurm answers "Job is pending execution"
    server.routes[("GET", f"{base}/requeue?Hold")] = (422, "rest-job-requeue-pending")
    server.routes[("GET", base)] = (200, "rest-job-requeued-held")
    again = await backend.requeue_job(job, hold=True)
    assert not again.changed
    await backend.aclose()


async def test_26_05_requeue_of_a_job_slurm_was_racing_is_a_no_op() -> None:
    job = job_id_in("26.05", "rest-job-running")
    base = "/slurm/v0.0.45/job/" + job
    reads = iter(["rest-job-running", "rest-job-requeued-held"])
    server = Recorded("26.05", {("GET", f"{base}/requeue"): (422, "rest-job-requeue-pending")})
    original = server.handler

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == base:
            server.seen.append(("GET", base, None))
            return httpx.Response(200, json=recorded("26.05", next(reads)))
        return original(request)

    server.handler = handler  # type: ignore[method-assign]
    backend = server.backend()
    result = await backend.requeue_job(job)
    assert not result.changed and "already requeued" in result.detail
    await backend.aclose()


async def test_26_05_requeue_errors_are_classified() -> None:
    job = job_id_in("26.05", "rest-job-running")
    server = Recorded("26.05", {
        ("GET", "/slurm/v0.0.45/job/999999"): (404, "rest-job-unknown"),
        ("GET", f"/slurm/v0.0.45/job/{job}"): (200, "rest-job-running"),
        ("GET", f"/slurm/v0.0.45/job/{job}/requeue"): (422, "rest-job-requeue-disabled")})
    backend = server.backend()
    with pytest.raises(UnknownJobError):
        await backend.requeue_job("999999")
    with pytest.raises(PermanentSchedulerError, match="presently disabled"):
        await backend.requeue_job(job)
    await backend.aclose()


@pytest.mark.parametrize(("version", "api"), [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
async def test_excluded_nodes_are_updated_over_rest_merged_with_the_jobs_own(version: str, api: str) -> None:
    job = job_id_in(version, "rest-job-requeued-held")
    path = f"/slurm/{api}/job/{job}"
    server = Recorded(version, {("GET", path): (200, "rest-job-requeued-held"),
                                ("POST", path): (200, "rest-job-exclude")})
    backend = server.backend()
    assert (await backend.exclude_nodes(job, ["node2"])).changed
    assert server.writes() == [("POST", path, {"excluded_nodes": ["node2"]})]
    # the recorded job after the update excludes node1 and node2: adding node1 again changes nothing
    server.routes[("GET", path)] = (200, "rest-job-excluded")
    assert not (await backend.exclude_nodes(job, ["node1"])).changed
    assert (await backend.get_job(job)).excluded_nodes == ("node1", "node2")
    assert (await backend.get_job(job)).state is JobState.PENDING
    await backend.aclose()


@pytest.mark.parametrize(("version", "api"), [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
async def test_unknown_nodes_are_unknown(version: str, api: str) -> None:
    # a read answers HTTP 200 "Failure to query node nosuchnode" / "No error"; an update 422 or 500
    server = Recorded(version, {("GET", f"/slurm/{api}/node/nosuchnode"): (200, "rest-node-unknown"),
                                ("POST", f"/slurm/{api}/node/nosuchnode"): (
                                    422 if version == "26.05" else 500, "rest-node-update-unknown")})
    backend = server.backend()
    with pytest.raises(UnknownNodeError):
        await backend.get_node("nosuchnode")
    with pytest.raises(UnknownNodeError):
        await backend.drain_node("nosuchnode", "goodput:inc-x: y")
    await backend.aclose()


async def test_24_11_has_no_rest_requeue_and_without_a_fallback_says_so() -> None:
    job = job_id_in("24.11", "rest-job-running")
    server = Recorded("24.11", {("GET", f"/slurm/v0.0.42/job/{job}"): (200, "rest-job-running")})
    backend = server.backend()
    with pytest.raises(PermanentSchedulerError, match="cannot requeue"):
        await backend.requeue_job(job)
    assert server.writes() == []
    await backend.aclose()
