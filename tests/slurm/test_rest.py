"""slurmrestd specifics on the live lab: what it advertises, and an unreachable server.

The Scheduler rules through REST (with the CLI fallback) are covered by the contract suite.
"""

from __future__ import annotations

import subprocess

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.scheduler import PermanentSchedulerError, SchedulerError, TransientSchedulerError
from goodput.slurm import restapi
from tests.helpers import free_port

from .conftest import Lab, Restd

pytestmark = pytest.mark.slurm


async def test_negotiates_the_newest_version_the_server_offers(lab: Lab, slurmrestd: Restd) -> None:
    backend = SlurmRestBackend(slurmrestd.url, user=slurmrestd.user, token=slurmrestd.token, allow_http=True)
    try:
        version = await backend.api_version()
        release = subprocess.run(["slurmd", "-V"], capture_output=True, text=True).stdout
        if " 22.05." in release:
            assert version == "v0.0.38"  # 22.05 serves v0.0.36-38 and cannot update nodes
            with pytest.raises(PermanentSchedulerError, match="fallback"):
                await backend.drain_node("node1", "goodput:inc-rest: x")
        else:
            assert version in restapi.SUPPORTED_VERSIONS
        assert {n.name for n in await backend.list_nodes()} >= {"node1", "node2", "node3", "node4"}
    finally:
        await backend.aclose()


async def test_bad_token_never_reads_as_an_empty_cluster(lab: Lab, slurmrestd: Restd) -> None:
    # 22.05 (SLURM_JWT=daemon) passes the token through to slurmctld, which rejects it: HTTP 500
    # "Unspecified error", the same answer as a controller outage. It must not become "no jobs".
    backend = SlurmRestBackend(slurmrestd.url, user=slurmrestd.user, token="not-a-jwt", allow_http=True,
                               fallback=SlurmCliBackend())
    try:
        with pytest.raises(SchedulerError):
            await backend.list_jobs()
        with pytest.raises(SchedulerError):
            await backend.list_nodes()
    finally:
        await backend.aclose()


async def test_unreachable_server_is_transient(lab: Lab) -> None:
    backend = SlurmRestBackend(f"http://127.0.0.1:{free_port()}", user="root", token="x", timeout_s=5,
                               allow_http=True)
    try:
        with pytest.raises(TransientSchedulerError):
            await backend.get_job("1")
    finally:
        await backend.aclose()
