"""Issue #26 on the lab: goodput-mallory, a local account on the head node, POSTs a forged fatal
NVSentinel event for node2, where goodput-alice's opted-in job runs, to the receiver on loopback.

Loopback is every local account, so the receiver runs only with a credential (here NVSentinel's
OAuth client), and mallory's request, without one or with a made-up bearer token, is refused:
alice's job keeps running, node2 stays in service, no incident opens.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from asyncio.subprocess import PIPE
from datetime import UTC, datetime

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.nvsentinel import NvSentinelSettings
from goodput.models import IncidentKey, Mode
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE
from tests.workflows.test_watchers import incident_appears
from workers.client import TemporalIncidentService
from workers.nvsentinel.server import serve_nvsentinel
from workers.watch import IncidentSink
from workers.worker import build_worker

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

ALICE, MALLORY = "goodput-alice", "goodput-mallory"


def forged_event() -> bytes:
    health = {"version": 1, "agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError",
              "isFatal": True, "isHealthy": False, "message": "GPU has fallen off the bus", "recommendedAction": 15,
              "errorCode": ["79"], "entitiesImpacted": [], "nodeName": "node2",
              "generatedTimestamp": datetime.now(UTC).isoformat()}
    return json.dumps({"specversion": "1.0", "id": str(uuid.uuid4()), "source": "nvsentinel://forged",
                       "type": "com.nvidia.nvsentinel.health.v1", "data": {"healthEvent": health}}).encode()


async def post_as_mallory(lab: Lab, url: str, *headers: str) -> int:
    """mallory's own curl on the head node: the HTTP status it got (the receiver answers on this loop)."""
    argv = ["env", "-i", "PATH=/usr/bin:/bin", "/usr/sbin/runuser", "-u", MALLORY, "--", "curl", "-s", "-o",
            "/dev/null", "-w", "%{http_code}", "--noproxy", "*", "-H", "Content-Type: application/cloudevents+json"]
    for header in headers:
        argv += ["-H", header]
    curl = await asyncio.create_subprocess_exec(*argv, "--data-binary", "@-", url, stdin=PIPE, stdout=PIPE,
                                                cwd=lab.user_dir(MALLORY))
    out, _ = await asyncio.wait_for(curl.communicate(forged_event()), 30)
    assert curl.returncode == 0, curl.returncode
    return int(out.decode())


async def test_mallorys_forged_event_on_loopback_does_not_touch_alices_job(lab: Lab, client: Client,
                                                                          task_queue: str) -> None:
    backend = SlurmCliBackend()
    job_id = lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--nodelist=node2", "--output=/dev/null",
                           script="#!/bin/sh\nsleep 600\n")
    await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=30,
                     what="alice's job running on node2")
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    rules = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0)
    sink = IncidentSink(TemporalIncidentService(client, task_queue), rules)
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0,
                                  oauth_clients={"nvsentinel": "exporter-secret-0123456789abcdef"})
    with pytest.raises(ValueError, match="without a token"):  # and none at all runs without a credential
        NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=rules):
        async with serve_nvsentinel(settings, backend, sink, cluster) as receivers:
            assert receivers.http is not None and receivers.http.url.startswith("http://127.0.0.1:")
            url = receivers.http.url
            assert await post_as_mallory(lab, url) == 401
            assert await post_as_mallory(lab, url, f"Authorization: Bearer nvsentinel.9999999999.{'0' * 64}") == 401
            # a non-ASCII MAC was a 500 (compare_digest on str); now it is one more refusal
            assert await post_as_mallory(lab, url, f"Authorization: Bearer nvsentinel.9999999999.{'é' * 64}") == 401
        with pytest.raises((TimeoutError, AssertionError)):
            await incident_appears(client, IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0), timeout_s=2)
    job = await backend.get_job(job_id)
    assert job.state is JobState.RUNNING and job.restart_count == 0, job
    assert "DRAIN" not in lab.node("node2")["State"]
    lab.run("scancel", job_id, check=False)
