"""On the lab: slurmd runs goodput's prolog and epilog (deploy/slurm/) for every job.

A real push endpoint receives each node's layout record of a real 2-node job (nvidia-smi is a fake
named in the lab's settings file: the lab has no GPUs), and the `attribute` activity then uses
that layout to blame the host and GPU of a rank that a log names without its host. With goodput
down, or silent, jobs still start promptly and no node is drained. A job of an unprivileged user
with a hostile name, comment and environment changes nothing in its record.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import ActivityEnvironment

from activities.adapters.layout import LayoutStore
from activities.adapters.slurm_cli import SlurmCliBackend
from activities.recovery import RecoveryActivities
from goodput.detect.push import PushConfig
from goodput.diagnose.classify import anomaly_from_verdict, classify_lines
from goodput.diagnose.layout import JobLayout
from goodput.models import Category, CulpritKind, IncidentKey
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import AttributeInput
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, JobState
from tests.fakes.notifier import RecordingNotifier
from tests.fakes.sink import RecordingSink
from workers.push import PushServer, serve_push

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm]

TOKEN = "lab-layout-token-0123456789"
MALLORY = "goodput-mallory"
# Eight GPUs per node at the same PCI addresses on every node, each with a UUID of its own node's.
FAKE_SMI = """#!/bin/bash
n=${SLURMD_NODENAME#node}
for i in 0 1 2 3 4 5 6 7; do
  printf '%d, 00000000:%02X:00.0, GPU-%08d-0000-4000-8000-%012d, 16520000%04d\\n' \\
    "$i" $((0x1b + 0x20 * i)) "$n" "$i" "$i"
done
"""
ECC = ["[rank5]: Traceback (most recent call last):",
       "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
# Time from sbatch to a running job that the tests accept, goodput silent included (its POST is cut
# at 2 s on each node, in parallel).
START_BOUND_S = 12.0


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{int(node.removeprefix('node')):08d}-0000-4000-8000-{index:012d}"


@dataclass
class Endpoint:
    server: PushServer
    store: LayoutStore
    cluster: str


@pytest.fixture
def settings_file(lab: Lab) -> Iterator[Path]:
    """The lab's prolog settings file, put back as up.sh wrote it after the test."""
    path = lab.dir / "etc" / "goodput-prolog.env"
    default = path.read_text()
    yield path
    path.write_text(default)
    path.chmod(0o600)


def point_at(path: Path, url: str, **extra: str) -> None:
    lines = [f"GOODPUT_PUSH_URL={url}", f"GOODPUT_PUSH_TOKEN={TOKEN}", *(f"{k}={v}" for k, v in extra.items())]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


@pytest_asyncio.fixture
async def endpoint(tmp_path: Path, settings_file: Path) -> AsyncIterator[Endpoint]:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    store = LayoutStore(tmp_path / "layouts")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    config = PushConfig(enabled=True, port=0, tokens=(TOKEN,))
    async with serve_push(config, RecordingSink(), cluster, layouts=store) as server:
        point_at(settings_file, server.url, NVIDIA_SMI=str(smi), GOODPUT_CLUSTER=cluster, GOODPUT_NODE_GPUS="8")
        yield Endpoint(server=server, store=store, cluster=cluster)


async def running(backend: SlurmCliBackend, job_id: str, timeout: float = START_BOUND_S) -> JobInfo:
    return await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                            timeout=timeout, interval=0.1, what=f"job {job_id} to run")


async def finished(backend: SlurmCliBackend, job_id: str) -> JobInfo:
    """The job's end, epilog included (COMPLETING lasts until every node's epilog finished)."""
    return await eventually(lambda: backend.get_job(job_id), lambda j: j.state not in ACTIVE_JOB_STATES,
                            timeout=30, what=f"job {job_id} to end")


async def layout_of(endpoint: Endpoint, job_id: str, nodes: int, *, ended: bool = False) -> JobLayout:
    async def read() -> JobLayout | None:
        return endpoint.store.job_layout(endpoint.cluster, job_id, 0)

    def complete(layout: JobLayout | None) -> bool:
        return (layout is not None and len(layout.nodes) == nodes
                and all((n.ended_at is not None) == ended for n in layout.nodes))

    found = await eventually(read, complete, timeout=20, what=f"the layout of job {job_id} (ended: {ended})")
    assert found is not None
    return found


async def test_each_nodes_layout_arrives_and_places_a_rank(lab: Lab, endpoint: Endpoint) -> None:
    backend = SlurmCliBackend()
    job_id = lab.sbatch("-N2", "--gres=gpu:4", "--output=/dev/null", "--wrap", "sleep 300")
    job = await running(backend, job_id)
    layout = await layout_of(endpoint, job_id, 2)
    # Each node where Slurm's node list puts it, with the 4 GPUs Slurm gave the job there.
    assert [(n.node, n.node_index, n.node_count) for n in layout.nodes] == [(job.nodes[0], 0, 2), (job.nodes[1], 1, 2)]
    for node in layout.nodes:
        assert [(g.index, g.uuid) for g in node.gpus] == [(i, gpu_uuid(node.node, i)) for i in range(4)]
        assert node.gpus[1].pci_bus_id == "00000000:3B:00.0" and node.gpus[1].serial == "165200000001"
        assert (node.check.status, node.check.detail) == ("ok", "nvidia-smi lists 8 GPUs")

    # A log that names only rank 5: 4 ranks per node, so node index 1, local rank 1, its GPU 1.
    seen = layout.nodes[0].recorded_at
    evidence = anomaly_from_verdict(classify_lines(ECC), anomaly_id="log-ecc", job_id=job_id, observed_at=seen,
                                    detected_at=seen, cluster=endpoint.cluster)
    assert evidence.nodes == () and evidence.ranks == (5,)
    activities = RecoveryActivities(backend, RecordingNotifier(), LocalDrainGate(), layouts=endpoint.store)
    result = await ActivityEnvironment().run(activities.attribute, AttributeInput(
        incident_id="inc-layout", key=IncidentKey(cluster=endpoint.cluster, job_id=job_id, job_attempt=0),
        anomalies=(evidence,)))
    attribution = result.attribution
    assert (attribution.category, attribution.drain) == (Category.GPU_HARDWARE, True)
    assert attribution.culprit_nodes == (job.nodes[1],)
    assert [c.id for c in attribution.culprits if c.kind is CulpritKind.GPU] == [gpu_uuid(job.nodes[1], 1)]
    assert f"{job.nodes[1]} GPU 1 ({gpu_uuid(job.nodes[1], 1)}): rank 5 is local rank 1 of node 1" in (
        attribution.explanation)

    # The epilog reports the end of the job on both nodes.
    lab.run("scancel", job_id)
    ended = await layout_of(endpoint, job_id, 2, ended=True)
    assert {n.end_check.status for n in ended.nodes if n.end_check is not None} == {"ok"}


async def test_goodput_down_or_silent_never_holds_back_or_drains(lab: Lab, settings_file: Path,
                                                                 tmp_path: Path) -> None:
    """The job's script starts (PrologFlags=Alloc: after every node's prolog) within the bound, ends
    COMPLETED, and its nodes stay in service; a silent goodput costs the POST's 2 s, no more."""
    backend = SlurmCliBackend()
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        for case, url, least in (("down", None, 0.0), ("silent", f"http://127.0.0.1:{silent.getsockname()[1]}", 1.8)):
            if url is not None:
                point_at(settings_file, url)
            stamp = tmp_path / f"started-{case}"
            submitted = time.time()
            job_id = lab.sbatch("-N2", "--gres=gpu:1", "--output=/dev/null", "--wrap",
                                f"date +%s.%N > {stamp}; sleep 1")
            job = await running(backend, job_id)
            done = await finished(backend, job_id)
            assert done.state is JobState.COMPLETED, done
            took = float(stamp.read_text()) - submitted
            assert least < took < START_BOUND_S, (case, took)
            for node in job.nodes:
                state = lab.node(node)["State"]
                assert "DRAIN" not in state and "DOWN" not in state, (node, state)
        # Both nodes' prolog and epilog did knock on the silent endpoint.
        silent.setblocking(False)
        knocks = 0
        while True:
            try:
                silent.accept()[0].close()
            except BlockingIOError:
                break
            knocks += 1
        assert knocks == 4


async def test_a_users_job_cannot_steer_its_record(lab: Lab, endpoint: Endpoint) -> None:
    marker = lab.user_dir(MALLORY) / "prolog-ran-my-code"
    hostile = f'x","node":"node9","y":"$(touch {marker})`touch {marker}`'
    evil_smi = lab.user_dir(MALLORY) / "nvidia-smi"
    evil_smi.write_text(f"#!/bin/bash\ntouch {marker}\n")
    evil_smi.chmod(0o755)
    backend = SlurmCliBackend()
    job_id = lab.sbatch_as(
        MALLORY, "-N2", "--gres=gpu:2", "--output=/dev/null", f"--job-name={hostile[:60]}", f"--comment={hostile}",
        f"--export=SLURMD_NODENAME=node9,SLURM_JOB_GPUS=7,GOODPUT_PROLOG_ENV={evil_smi},NVIDIA_SMI={evil_smi},"
        "PATH=/nowhere", script="#!/bin/bash\n/bin/sleep 300\n")
    job = await running(backend, job_id)
    assert job.user == MALLORY
    layout = await layout_of(endpoint, job_id, 2)
    assert [n.node for n in layout.nodes] == list(job.nodes) and "node9" not in job.nodes
    assert all([g.index for g in n.gpus] == [0, 1] and n.check.status == "ok" for n in layout.nodes)
    assert not marker.exists()
    # Nothing but the job's own records, at the paths goodput chose.
    files = sorted(p.relative_to(endpoint.store.root).as_posix() for p in endpoint.store.root.rglob("*")
                   if p.is_file())
    assert files == [f"{endpoint.cluster}/{job_id}/0/{n}.json" for n in job.nodes]
