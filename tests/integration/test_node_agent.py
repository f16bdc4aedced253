"""The node agent's loop against a fake probe, a real kernel log file, the fake scheduler and a recording sink."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.adapters.dcgm import DcgmScraper
from activities.adapters.gpu_nvml import NvmlCollector, NvmlUnavailableError
from activities.adapters.node_agent import NodeAgent, probe_from, resolve_node, run_agent
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.gpu import GpuProbe, GpuSample, XidEvent
from goodput.detect.node_agent import AgentCheckpoint, AgentConfig
from goodput.detect.watch import OptInRule
from goodput.scheduler import JobInfo
from tests.fakes.gpu import FakeGpuProbe, healthy_gpus
from tests.fakes.sink import RecordingSink
from tests.helpers import eventually

pytestmark = pytest.mark.timeout(30)
NODE = "node1"  # demo_cluster runs opted-in job 1001 on node1 and node2
GPUS = healthy_gpus(NODE)


def xid_line(code: int, bus: str = "48", message: str = "GPU has fallen off the bus.") -> str:
    return f"Nov 29 09:12:01 {NODE} kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1234, name=python, {message}\n"


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


async def until(condition: Callable[[], object], what: str, timeout_s: float = 5.0) -> None:
    await eventually(condition, timeout=timeout_s, interval=0.01, what=what)


@asynccontextmanager
async def running(agent: NodeAgent) -> AsyncIterator[NodeAgent]:
    """Run the agent until the block ends, and wait for its first full step so the log's end is taken."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: agent.stats.steps >= 1 or task.done(), "the first step")
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def make_agent(sink: RecordingSink, *, probe: GpuProbe | None = None, kernel_log: Path | None = None,
               scheduler: FakeScheduler | None = None, state_file: Path | None = None,
               probe_timeout_s: float = 10.0) -> NodeAgent:
    return NodeAgent(NODE, "c1", probe, kernel_log, scheduler or FakeScheduler(demo_cluster()), sink, OptInRule(),
                     interval_s=0.01, job_refresh_s=0.05, state_file=state_file, probe_timeout_s=probe_timeout_s)


async def test_nvml_xid_becomes_one_anomaly_of_the_job_on_the_node() -> None:
    sink, probe = RecordingSink(), FakeGpuProbe([GPUS])
    async with running(make_agent(sink, probe=probe)) as agent:
        probe.push_xid(XidEvent(code=79, gpu_index=3, uuid=GPUS[3].uuid, pci_bus_id=GPUS[3].pci_bus_id, node=NODE,
                                observed_at=datetime.now(UTC)))
        await until(lambda: sink.anomalies, "the Xid anomaly")
        ticks = agent.stats.ticks
        await until(lambda: agent.stats.ticks >= ticks + 5, "more ticks")
    [anomaly] = sink.anomalies
    assert (anomaly.job_id, anomaly.job_attempt, anomaly.nodes) == ("1001", 0, (NODE,))
    assert anomaly.signature_ids == ("xid-79",)
    assert probe.sample_calls >= 2


async def test_kernel_log_xids_arrive_once_and_a_restart_with_state_neither_repeats_nor_misses(
        tmp_path: Path) -> None:
    kern, state = tmp_path / "kern.log", tmp_path / "agent" / "state.json"
    kern.write_text(xid_line(62, message="old news from last week"))
    sink = RecordingSink()
    lost = [GPUS[0].model_copy(update={"gpu_lost": True}), *GPUS[1:]]
    async with running(make_agent(sink, probe=FakeGpuProbe([lost]), kernel_log=kern, state_file=state)):
        append(kern, "Nov 29 09:12:00 node1 kernel: some other driver line\n" + xid_line(48))
        await until(lambda: sorted(sink.rules()) == ["gpu-lost", "xid-48"], "gpu-lost and Xid 48")
    assert "xid-62" not in sink.rules()  # what the log held before the first start is history

    append(kern, xid_line(74, message="NVLink: fatal error"))  # written while the agent is down
    async with running(make_agent(sink, probe=FakeGpuProbe([lost]), kernel_log=kern, state_file=state)) as again:
        await until(lambda: "xid-74" in sink.rules(), "the Xid written during the downtime")
        steps = again.stats.steps
        await until(lambda: again.stats.steps >= steps + 5, "more steps")
    assert sorted(sink.rules()) == ["gpu-lost", "xid-48", "xid-74"]
    assert len({a.id for a in sink.anomalies}) == 3
    saved = AgentCheckpoint.model_validate_json(state.read_text())
    assert saved.kernel_cursor is not None and saved.kernel_cursor.offset == kern.stat().st_size
    assert saved.outbox == () and saved.state.previous == ()


async def test_kernel_log_truncated_and_rotated(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("boot\n")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=kern)):
        append(kern, xid_line(48) + "padding line so that the truncated file is shorter\n")
        await until(lambda: sink.rules() == ["xid-48"], "Xid 48")
        with open(kern, "w") as f:  # copytruncate-style rotation
            f.write(xid_line(64, message="row remapping failure"))
        await until(lambda: "xid-64" in sink.rules(), "the Xid after truncation")
        os.rename(kern, tmp_path / "kern.log.1")  # rename-style rotation, then the writer goes on in the old file
        append(tmp_path / "kern.log.1", xid_line(95, bus="3b", message="Uncontained ECC error"))
        kern.write_text(xid_line(119, message="Timeout after 6s of waiting for RPC response from GPU0 GSP!"))
        await until(lambda: {"xid-95", "xid-119"} <= set(sink.rules()), "both sides of the rotation")
    assert sorted(sink.rules()) == ["xid-119", "xid-48", "xid-64", "xid-95"]


async def test_journal_export_records_carry_their_time(tmp_path: Path) -> None:
    export = tmp_path / "kernel.export"
    export.write_text("")
    sink = RecordingSink()
    when = datetime.now(UTC).replace(microsecond=123456)
    micros = int(when.timestamp()) * 1_000_000 + when.microsecond
    async with running(make_agent(sink, kernel_log=export)):
        append(export, f"__CURSOR=s=1;i=2\n__REALTIME_TIMESTAMP={micros}\n_TRANSPORT=kernel\n")
        append(export, "MESSAGE=NVRM: Xid (PCI:0000:48:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
                       "_HOSTNAME=node1.cluster.example\n\n")
        await until(lambda: sink.anomalies, "the exported Xid")
    [anomaly] = sink.anomalies
    assert anomaly.observed_at == when and anomaly.nodes == (NODE,)


class BrokenProbe:
    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.calls = 0

    async def sample(self) -> Sequence[GpuSample]:
        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        raise RuntimeError("NVML: GPU is lost")

    async def poll_xid_events(self, timeout_ms: int) -> Sequence[XidEvent]:
        raise RuntimeError("NVML: unknown error")


@pytest.mark.parametrize("hang", [False, True])
async def test_a_failing_or_hanging_probe_never_stops_the_kernel_log(tmp_path: Path, hang: bool) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    sink, probe = RecordingSink(), BrokenProbe(hang=hang)
    async with running(make_agent(sink, probe=probe, kernel_log=kern, probe_timeout_s=0.05)) as agent:
        append(kern, xid_line(79))
        await until(lambda: sink.rules() == ["xid-79"], "the kernel Xid")
        if hang:
            await until(lambda: agent.stats.probe_timeouts >= 3, "probe timeouts")
            assert probe.calls == 1  # a hung call is waited for, never stacked
        else:
            await until(lambda: agent.stats.probe_errors >= 4, "probe errors")


class FlakyScheduler(FakeScheduler):
    def __init__(self) -> None:
        super().__init__(demo_cluster())
        self.failures = 3

    async def list_jobs(self) -> Sequence[JobInfo]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("slurmctld is restarting")
        return await super().list_jobs()


async def test_xids_wait_for_the_job_list_and_unsent_anomalies_for_the_sink(tmp_path: Path) -> None:
    kern, state = tmp_path / "kern.log", tmp_path / "state.json"
    kern.write_text("")
    sink, scheduler = RecordingSink(), FlakyScheduler()
    sink.failing = True
    agent = make_agent(sink, kernel_log=kern, scheduler=scheduler, state_file=state)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: agent.stats.ticks >= 1, "the first tick")
        append(kern, xid_line(79))
        await until(lambda: agent.stats.sink_errors >= 2, "failed submissions")
        assert agent.stats.scheduler_errors == 3
        assert sink.anomalies == []
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert len(AgentCheckpoint.model_validate_json(state.read_text()).outbox) == 1

    sink.failing = False  # Temporal is back; the restarted agent sends what the first could not
    async with running(make_agent(sink, kernel_log=kern, state_file=state)):
        await until(lambda: sink.anomalies, "the delayed anomaly")
    assert sink.rules() == ["xid-79"]
    assert AgentCheckpoint.model_validate_json(state.read_text()).outbox == ()


async def test_an_xid_of_a_job_that_started_after_the_last_job_list_is_still_its_jobs(tmp_path: Path) -> None:
    """The job list is refreshed every job_refresh_s; an Xid read in between is stepped against a
    list asked for after it, else a job started since (its first minutes) would lose its Xid."""
    cluster = demo_cluster()
    job = cluster.jobs.pop("1001")
    kern = tmp_path / "kern.log"
    kern.write_text("")
    sink = RecordingSink()
    agent = NodeAgent(NODE, "c1", None, kern, FakeScheduler(cluster), sink, OptInRule(), interval_s=0.01,
                      job_refresh_s=3600)
    async with running(agent):
        cluster.jobs["1001"] = job  # starts now, long before the next periodic list
        append(kern, xid_line(79))
        await until(lambda: sink.anomalies, "the Xid pinned on the new job")
    assert [(a.job_id, a.signature_ids) for a in sink.anomalies] == [("1001", ("xid-79",))]


async def test_no_job_on_the_node_and_jobs_not_opted_in_get_nothing(tmp_path: Path) -> None:
    cluster = demo_cluster()
    cluster.jobs["1001"] = cluster.jobs["1001"].model_copy(update={"comment": ""})
    kern = tmp_path / "kern.log"
    kern.write_text("")
    sink = RecordingSink()
    for node in (NODE, "node8"):  # node8 runs no job at all
        agent = NodeAgent(node, "c1", None, kern, FakeScheduler(cluster), sink, OptInRule(), interval_s=0.01)
        async with running(agent):
            append(kern, xid_line(79))
            stats = agent.stats
            await until(lambda: stats.kernel_xids >= 1 and stats.steps >= 3, "the Xid read")  # noqa: B023
    assert sink.anomalies == []


async def test_run_agent_without_a_probe(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    config = AgentConfig(node=NODE, probe="none", kernel_log=kern, interval_s=0.01, state_file=tmp_path / "s.json",
                         jobs_from="controller")  # the demo cluster has no slurmd to list its processes
    sink, stop = RecordingSink(), asyncio.Event()
    task = asyncio.create_task(run_agent(config, "c1", FakeScheduler(demo_cluster()), sink, stop))
    await until(lambda: (tmp_path / "s.json").exists(), "the first step's state file")
    append(kern, xid_line(79))
    await until(lambda: sink.anomalies, "the anomaly")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert sink.rules() == ["xid-79"]
    assert AgentCheckpoint.model_validate_json((tmp_path / "s.json").read_text()).kernel_cursor is not None
    assert resolve_node(AgentConfig(node="gpu-a17")) == "gpu-a17"
    async with probe_from("none", config.dcgm_url) as probe:
        assert probe is None



async def test_a_kernel_log_that_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    export = tmp_path / "kernel.export"
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=export)) as agent:
        export.write_text("MESSAGE=NVRM: Xid (PCI:0000:48:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
                          "_TRANSPORT=kernel\n\n")
        await until(lambda: sink.anomalies, "the Xid in the new file")
        assert agent.stats.kernel_errors == 0


def _nvml_works() -> bool:
    try:
        with NvmlCollector(node=NODE, watch_xids=False):
            pass
    except NvmlUnavailableError:
        return False
    return True


async def test_probe_factory_and_a_node_without_nvml(tmp_path: Path) -> None:
    async with probe_from("dcgm", "http://127.0.0.1:9/metrics", node=NODE) as dcgm:
        assert isinstance(dcgm, DcgmScraper)
    if _nvml_works():
        pytest.skip("NVML works here: the fallback path is for nodes without it")
    config = AgentConfig(node=NODE, probe="nvml")
    with pytest.raises(NvmlUnavailableError):
        await run_agent(config, "c1", FakeScheduler(demo_cluster()), RecordingSink(), asyncio.Event())
    kern = tmp_path / "kern.log"
    kern.write_text("")
    stop = asyncio.Event()
    stop.set()  # one look is enough: it must start on the kernel log alone rather than fail
    await run_agent(config.model_copy(update={"kernel_log": kern}), "c1", FakeScheduler(demo_cluster()),
                    RecordingSink(), stop)
