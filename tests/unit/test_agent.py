"""The node agent's pure step: which GPU findings and Xids become anomalies of which job attempts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from goodput.detect.gpu import GpuSample, XidEvent
from goodput.detect.logtail import TailCursor
from goodput.detect.node_agent import AgentCheckpoint, AgentConfig, NodeAgentState, agent_step
from goodput.detect.watch import OptInRule
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category
from goodput.scheduler import JobInfo, JobState
from tests.fakes.gpu import healthy_gpus

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
NODE = "node1"
GPUS = healthy_gpus(NODE)
PCI3 = GPUS[3].pci_bus_id


def job(job_id: str = "42", attempt: int = 1, *, state: JobState = JobState.RUNNING,
        nodes: Sequence[str] = (NODE, "node2"), comment: str = "goodput:opt-in") -> JobInfo:
    return JobInfo(job_id=job_id, state=state, nodes=tuple(nodes), comment=comment, restart_count=attempt)


def xid(code: int = 79, *, gpu: int = 3, at: datetime = NOW, source: str = "nvml") -> XidEvent:
    return XidEvent(code=code, gpu_index=gpu, uuid=GPUS[gpu].uuid, pci_bus_id=GPUS[gpu].pci_bus_id, node=NODE,
                    source=source, observed_at=at)


def step(state: NodeAgentState | None = None, *, samples: Sequence[GpuSample] = GPUS,
         xids: Sequence[XidEvent] = (), kernel: Sequence[XidEvent] = (), jobs: Sequence[JobInfo] = (),
         now: datetime = NOW, **kw: Any) -> tuple[NodeAgentState, list[Anomaly]]:
    return agent_step(state or NodeAgentState(), node=NODE, cluster="c1", samples=samples, xid_events=xids,
                      kernel_xids=kernel, jobs_on_node=jobs, now=now, opt_in=OptInRule(), **kw)


def test_xid79_on_a_node_running_an_opted_in_job_is_one_anomaly_naming_the_node() -> None:
    _, anomalies = step(xids=[xid(79)], jobs=[job("42", 1)])
    [anomaly] = anomalies
    assert (anomaly.job_id, anomaly.job_attempt, anomaly.cluster) == ("42", 1, "c1")
    assert anomaly.nodes == (NODE,)
    assert anomaly.signature_ids == ("xid-79",)
    assert anomaly.source is AnomalySource.GPU and anomaly.kind is AnomalyKind.GPU_FAULT
    assert anomaly.category is Category.GPU_HARDWARE
    assert anomaly.gpus == (GPUS[3].uuid,)
    assert anomaly.observed_at == NOW and anomaly.detected_at == NOW
    assert any("Xid 79" in line for line in anomaly.evidence)


def test_kernel_log_xid_becomes_an_anomaly_and_coalesces_with_the_same_nvml_xid() -> None:
    kernel = XidEvent(code=79, pci_bus_id="0000:48:00.0", node="node1.cluster.example", source="kmsg",
                      observed_at=NOW + timedelta(milliseconds=3))
    assert PCI3 == "0000:48:00.0"
    _, only_kernel = step(kernel=[kernel], jobs=[job()])
    [anomaly] = only_kernel
    assert anomaly.signature_ids == ("xid-79",) and anomaly.nodes == (NODE,)
    _, both = step(xids=[xid(79)], kernel=[kernel], jobs=[job()])
    assert [a.id for a in both] == [anomaly.id]


def test_kernel_xid_without_any_probe_is_named_by_its_pci_id() -> None:
    kernel = XidEvent(code=48, pci_bus_id="0000:3b:00.0", source="kmsg", observed_at=NOW)
    _, [anomaly] = step(samples=(), kernel=[kernel], jobs=[job()])
    assert anomaly.gpus == ("0000:3b:00.0",) and anomaly.nodes == (NODE,)
    assert anomaly.signature_ids == ("xid-48",)


@pytest.mark.parametrize("samples, xids", [
    ([GPUS[0].model_copy(update={"row_remap_pending": True}), *GPUS[1:]], []),
    ([GPUS[0].model_copy(update={"clock_event_reasons": ("hw-thermal-slowdown",)}), *GPUS[1:]], []),
    ([GPUS[0].model_copy(update={"sm_clock_mhz": 900.0}), *GPUS[1:]], []),  # straggler hint
    ([GPUS[0].model_copy(update={"utilisation_pct": 0.0}), *GPUS[1:]], []),  # idle-among-busy hint
    (GPUS, [xid(13)]),  # application fault
    (GPUS, [xid(63)]),  # page retirement recorded
    (GPUS, [xid(999)]),  # unlisted
])
def test_warning_level_findings_are_not_anomalies(samples: list[GpuSample], xids: list[XidEvent]) -> None:
    state, anomalies = step(samples=samples, xids=xids, jobs=[job()])
    assert anomalies == []
    assert state.unattributed == ()


def test_no_job_on_the_node_means_no_anomaly_and_a_later_job_does_not_inherit_the_xid() -> None:
    state, anomalies = step(xids=[xid(79)], jobs=[])
    assert anomalies == []
    assert state.unattributed == (f"xid-79 on {GPUS[3].uuid}",)
    # The same event handed out again (NVML re-attaches it to the next sample) once a job has started.
    sample = GPUS[3].model_copy(update={"xid_events": (xid(79),)})
    _, anomalies = step(state, samples=[*GPUS[:3], sample, *GPUS[4:]], jobs=[job()], now=NOW + timedelta(seconds=2))
    assert anomalies == []


def test_the_same_xid_twice_is_reported_once() -> None:
    event = xid(79)
    carried = GPUS[3].model_copy(update={"xid_events": (event,)})
    state, first = step(samples=[*GPUS[:3], carried, *GPUS[4:]], xids=[event], jobs=[job()])
    assert len(first) == 1
    state, second = step(state, xids=[event], jobs=[job()], now=NOW + timedelta(seconds=2))
    assert second == []
    # A second, later Xid 79 on the same GPU is the same finding for this attempt: the incident has it.
    _, third = step(state, xids=[xid(79, at=NOW + timedelta(seconds=3))], jobs=[job()],
                    now=NOW + timedelta(seconds=4))
    assert third == []


def test_a_job_that_did_not_opt_in_gets_nothing() -> None:
    state, anomalies = step(xids=[xid(79)], jobs=[job(comment="")])
    assert anomalies == [] and state.unattributed
    _, allowed = agent_step(NodeAgentState(), node=NODE, cluster="c1", samples=GPUS, xid_events=[xid(79)],
                            kernel_xids=[], jobs_on_node=[job(comment="")], now=NOW,
                            opt_in=OptInRule(all_jobs=True))
    assert len(allowed) == 1


@pytest.mark.parametrize("other", [job(state=JobState.PENDING), job(state=JobState.COMPLETING),
                                   job(nodes=("node7",))])
def test_only_jobs_running_on_this_node_count(other: JobInfo) -> None:
    assert step(xids=[xid(79)], jobs=[other])[1] == []


def test_two_jobs_on_the_node_get_one_anomaly_each() -> None:
    _, anomalies = step(xids=[xid(79)], jobs=[job("42", 1), job("43", 0, nodes=(NODE,))])
    assert sorted((a.job_id, a.job_attempt) for a in anomalies) == [("42", 1), ("43", 0)]
    assert len({a.id for a in anomalies}) == 2
    assert all(a.nodes == (NODE,) for a in anomalies)


def test_dcgm_job_label_picks_the_job_that_owns_the_gpu() -> None:
    labelled = [g.model_copy(update={"job_ids": ("43",) if g.index == 3 else ("42",)}) for g in GPUS]
    _, anomalies = step(samples=labelled, xids=[xid(79, source="dcgm")],
                        jobs=[job("42", 1), job("43", 0, nodes=(NODE,))])
    assert [(a.job_id, a.job_attempt) for a in anomalies] == [("43", 0)]
    # A label naming a job goodput does not see running here falls back to every job on the node.
    stale = [g.model_copy(update={"job_ids": ("7",)}) for g in GPUS]
    _, anomalies = step(samples=stale, xids=[xid(79, source="dcgm")], jobs=[job("42", 1), job("43", 0)])
    assert sorted(a.job_id for a in anomalies) == ["42", "43"]


def test_dcgm_last_xid_gauge_on_every_scrape_is_not_a_new_event() -> None:
    gauge = GpuSample.model_validate({**GPUS[3].model_dump(), "last_xid": 79,
                                      "xid_events": [xid(79, source="dcgm").model_dump()]})
    _, anomalies = step(samples=[*GPUS[:3], gauge, *GPUS[4:]], jobs=[job()])
    assert anomalies == []


def test_a_persistent_condition_is_reported_once_per_job_attempt() -> None:
    lost = [GPUS[0].model_copy(update={"gpu_lost": True}), *GPUS[1:]]
    state, first = step(samples=lost, jobs=[job("42", 1)])
    assert [a.id.split(":")[1] for a in first] == ["gpu-lost"]
    for tick in range(1, 4):
        state, again = step(state, samples=lost, jobs=[job("42", 1)], now=NOW + timedelta(seconds=2 * tick))
        assert again == []
    # Requeued: a new attempt is a new incident and must hear about the lost GPU too.
    state, requeued = step(state, samples=lost, jobs=[job("42", 2)], now=NOW + timedelta(seconds=10))
    assert [(a.job_attempt, a.id.split(":")[1]) for a in requeued] == [(2, "gpu-lost")]
    assert [(r.job_id, r.attempt) for r in state.reported] == [("42", 2)]


def test_aggregate_ecc_growth_uses_the_previous_step_and_survives_a_failed_probe() -> None:
    base = [GPUS[0].model_copy(update={"ecc_aggregate_uncorrected": 2}), *GPUS[1:]]
    grown = [GPUS[0].model_copy(update={"ecc_aggregate_uncorrected": 3}), *GPUS[1:]]
    state, anomalies = step(samples=base, jobs=[job()])
    assert anomalies == []
    state, anomalies = step(state, samples=(), jobs=[job()])  # the probe failed this round
    assert anomalies == [] and len(state.previous) == len(GPUS)
    _, anomalies = step(state, samples=grown, jobs=[job()])
    assert [a.id.split(":")[1] for a in anomalies] == ["ecc-uncorrectable"]


def test_an_old_timestamped_xid_is_not_pinned_on_todays_job() -> None:
    old = xid(79, at=NOW - timedelta(hours=2))
    state, anomalies = step(kernel=[old], jobs=[job()])
    assert anomalies == [] and state.seen_xids == ()
    _, recent = step(kernel=[xid(79, at=NOW - timedelta(seconds=30))], jobs=[job()])
    assert len(recent) == 1
    _, lenient = step(kernel=[old], jobs=[job()], xid_max_age_s=3 * 3600)
    assert len(lenient) == 1


def test_samples_and_events_are_renamed_to_the_slurm_node() -> None:
    fqdn = [g.model_copy(update={"node": "node1.cluster.example"}) for g in GPUS]
    lost = [fqdn[0].model_copy(update={"gpu_lost": True}), *fqdn[1:]]
    state, [anomaly] = step(samples=lost, jobs=[job()])
    assert anomaly.nodes == (NODE,)
    assert all(s.node == NODE and s.xid_events == () for s in state.previous)


def test_ids_are_deterministic_across_agents() -> None:
    first = step(xids=[xid(79)], jobs=[job()])[1]
    restarted = step(xids=[xid(79, at=NOW + timedelta(seconds=40))], jobs=[job()],
                     now=NOW + timedelta(minutes=1))[1]
    assert [a.id for a in first] == [a.id for a in restarted]


def test_checkpoint_round_trips_as_json() -> None:
    state, anomalies = step(xids=[xid(79)], jobs=[job()])
    checkpoint = AgentCheckpoint(state=state, kernel_cursor=TailCursor(path="/var/log/kern.log", offset=10),
                                 outbox=tuple(anomalies))
    assert AgentCheckpoint.model_validate_json(checkpoint.model_dump_json()) == checkpoint


def test_agent_config_defaults_and_typos() -> None:
    config = AgentConfig()
    assert (config.node, config.probe, config.kernel_log, config.state_file) == ("", "nvml", None, None)
    assert config.dcgm_url == "http://127.0.0.1:9400/metrics"
    assert AgentConfig.model_validate({"probe": "dcgm", "kernel_log": "/var/log/kern.log"}).probe == "dcgm"
    with pytest.raises(ValidationError):
        AgentConfig.model_validate({"probe": "nvidia-smi"})
    with pytest.raises(ValidationError):
        AgentConfig.model_validate({"intervall_s": 1})


def test_naive_times_and_refused_job_ids_do_not_break_the_step() -> None:
    naive = XidEvent(code=79, pci_bus_id=PCI3, observed_at=NOW.replace(tzinfo=None))
    bad = job("not a job id!")
    state, anomalies = step(kernel=[naive], jobs=[bad, job("42", 1)])
    assert [(a.job_id, a.observed_at) for a in anomalies] == [("42", NOW)]
    assert any("not a job id!" in line for line in state.unattributed)
