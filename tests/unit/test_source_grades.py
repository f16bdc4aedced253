"""Confidence for the node's own evidence: agent Xids, NVML/DCGM health, NVSentinel, Slurm.

Under earned autonomy only a `high` verdict acts alone; these pin down that evidence other than a
job's log is graded from its documented semantics, and counts towards the same rule as the log.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goodput.detect.gpu import GpuSample, XidEvent
from goodput.detect.gpu_rules import evaluate
from goodput.detect.node_liveness import loss_grade
from goodput.detect.nvsentinel import event_anomalies, parse_event
from goodput.detect.scheduler_watch import changes, snapshot
from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import anomaly_from_verdict, classify_lines
from goodput.diagnose.source_grades import nvsentinel_grade, slurm_job_grade, slurm_node_grade, xid_grade
from goodput.models import Anomaly, Mode
from goodput.recover.trust import AutonomyPolicy, incident_mode
from goodput.scheduler import JobInfo, JobState, NodeInfo
from tests.unit.nvsentinel_cases import xid_event

NOW = datetime(2026, 12, 3, tzinfo=UTC)
JOB = JobInfo(job_id="7", state=JobState.RUNNING, nodes=("node1", "node2"))


def agent_xid(code: int) -> Anomaly:
    """The node agent's anomaly for an Xid it read from node1's kernel log."""
    sample = GpuSample(index=0, uuid="GPU-0", node="node1")
    [finding] = [f for f in evaluate([sample], xid_events=[XidEvent(code=code, uuid="GPU-0", node="node1",
                                                                     source="kmsg")]) if f.xid == code]
    return finding.to_anomaly(job_id="7", observed_at=NOW, detected_at=NOW, cluster="lab")


@pytest.mark.parametrize(("code", "level"), [(79, "high"), (48, "high"), (95, "high"), (13, "high"),
                                             (45, "medium"), (154, "medium"), (63, "low"), (4242, "low")])
def test_an_xid_is_graded_by_nvidias_bucket_under_the_log_paths_rule(code: int, level: str) -> None:
    grade = xid_grade(code)
    assert (grade.confidence, grade.rule) == (level, f"xid-{code}")


def test_an_agent_xid_in_a_drain_bucket_is_a_high_verdict_of_the_same_rule_as_the_log() -> None:
    agent = attribute([agent_xid(79)], JOB)
    verdict = classify_lines(["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."])
    log = attribute([anomaly_from_verdict(verdict, anomaly_id="log-1", job_id="7", observed_at=NOW,
                                          detected_at=NOW, cluster="lab", host="node1")], JOB)
    assert agent.confidence == "high" and agent.drain and agent.culprit_nodes == ("node1",)
    assert agent.rule == log.rule == "xid-79"


def test_an_agent_xid_that_earned_autonomy_acts_alone() -> None:
    attribution = attribute([agent_xid(79)], JOB)
    mode, why = incident_mode(Mode.AUTONOMOUS, Mode.AUTONOMOUS, "earned", pinned=False,
                              confidence=attribution.confidence, bar=AutonomyPolicy(earned=True))
    assert (mode, why) == (Mode.AUTONOMOUS, "")


@pytest.mark.parametrize(("field", "value", "rule", "level"), [
    ("gpu_lost", True, "gpu-health:gpu-lost", "high"),
    ("ecc_volatile_uncorrected", 2, "gpu-health:ecc-uncorrectable", "high"),
    ("row_remap_failure", True, "gpu-health:row-remap-failure", "high"),
    ("row_remap_pending", True, "gpu-health:row-remap-pending", "low"),
])
def test_nvml_and_dcgm_health_fatal_is_high_a_warning_low(field: str, value: object, rule: str, level: str) -> None:
    sample = GpuSample.model_validate({"index": 0, "uuid": "GPU-0", "node": "node1", field: value})
    [finding] = evaluate([sample])
    anomaly = finding.to_anomaly(job_id="7", observed_at=NOW, detected_at=NOW)
    assert (anomaly.confidence, anomaly.rule) == (level, rule)
    assert attribute([anomaly], JOB).rule == rule


@pytest.mark.parametrize(("action", "level"), [("RESTART_BM", "high"), ("COMPONENT_RESET", "high"),
                                               ("CONTACT_SUPPORT", "high"), ("RUN_FIELDDIAG", "medium"),
                                               ("RUN_DCGMEUD", "medium"), ("REPLACE_NODE_V2", "medium")])
def test_nvsentinel_is_graded_by_its_recommended_action(action: str, level: str) -> None:
    event = parse_event(xid_event(recommendedAction=action))
    [anomaly] = event_anomalies(event, node="node1", cluster="lab", jobs=[JOB], now=NOW)
    assert anomaly.confidence == level == nvsentinel_grade(event.recommended_action.value).confidence
    assert attribute([anomaly], JOB).rule == "xid-79"  # its Xid names the rule, as in a log


@pytest.mark.parametrize(("reason", "rule", "level"), [
    ("Not responding", "slurm-node-not-responding", "high"),
    ("Node unexpectedly rebooted", "slurm-node-rebooted", "high"),
    ("Kill task failed", "slurm-unkillable-step", "high"),
    # slurmctld's own reasons whose cause the reason leaves open (hardware or configuration; a node
    # or its power-up): Slurm's rule names them, and they stay medium.
    ("Low RealMemory (reported:512000 < 100.00% of configured:1031000)", "slurm-node-resources-low", "medium"),
    ("ResumeTimeout reached", "slurm-node-resume-failed", "medium"),
    ("bad psu, ticket 42", "", "medium"),
    ("", "", "medium"),
])
def test_a_node_slurm_set_down_is_graded_by_slurms_rule_for_its_reason(reason: str, rule: str, level: str) -> None:
    running = JobInfo(job_id="7", state=JobState.RUNNING, nodes=("node1",))
    before = snapshot([running], [NodeInfo(name="node1", state="ALLOCATED")])
    after = snapshot([running], [NodeInfo(name="node1", state="DOWN", flags=("NOT_RESPONDING",), reason=reason)])
    [anomaly] = changes(before, after, cluster="lab", now=NOW)
    assert (anomaly.confidence, anomaly.rule) == (level, rule) == (slurm_node_grade(reason).confidence,
                                                                   slurm_node_grade(reason).rule)
    assert attribute([anomaly], running).rule == (rule or "category:node-failure")


def test_a_job_slurm_ended_is_graded_by_its_state() -> None:
    named = slurm_job_grade("NODE_FAIL", nodes_named=True)
    assert (named.confidence, named.rule) == ("high", "slurm-state-node-fail")
    assert slurm_job_grade("NODE_FAIL", nodes_named=False).confidence == "medium"  # which node, Slurm does not say
    assert slurm_job_grade("FAILED", nodes_named=False).confidence == "low"  # a consequence
    dead = NodeInfo(name="node2", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding")
    before = snapshot([JOB], [NodeInfo(name="node1", state="ALLOCATED"), NodeInfo(name="node2", state="ALLOCATED")])
    after = snapshot([JOB.model_copy(update={"state": JobState.NODE_FAIL})], [NodeInfo(name="node1", state="ALLOCATED"),
                                                                              dead])
    ending = [a for a in changes(before, after, cluster="lab", now=NOW) if "job 7" in a.evidence[0]]
    assert [(a.confidence, a.rule) for a in ending] == [("high", "slurm-state-node-fail")]


def test_a_lost_node_is_graded_by_slurm_when_slurm_knows_else_medium() -> None:
    assert loss_grade(NodeInfo(name="n", state="DOWN", reason="Not responding")).confidence == "high"
    assert (loss_grade(NodeInfo(name="n", state="ALLOCATED")).confidence, loss_grade(None).rule) == ("medium",
                                                                                                      "node-loss")
