"""Attribution: kind/category defaults for plain anomalies, catalogue precedence for signed ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from goodput.diagnose.attribution import attribute, category_of, lead_signature
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, CulpritKind
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
# Log evidence may only implicate nodes Slurm lists for the job: this job runs on all the nodes
# the tests below name.
JOB = JobInfo(job_id="42", name="train", state=JobState.FAILED,
              nodes=("n1", "n2", "early", "late", "hx-1", "hx-9", "node9"))


def anomaly(n: int, kind: AnomalyKind, **kw: Any) -> Anomaly:
    at = T0 + timedelta(seconds=n)
    return Anomaly(id=f"a{n}", source=kw.pop("source", AnomalySource.LOG), kind=kind, job_id="42",
                   observed_at=at, detected_at=at, **kw)


def test_no_evidence() -> None:
    att = attribute([])
    assert (att.category, att.restart, att.drain) == (Category.UNKNOWN, False, False)


def test_gpu_fault_without_signatures_drains_its_node() -> None:
    att = attribute([anomaly(1, AnomalyKind.GPU_FAULT, nodes=("n1",), gpus=("0000:3b:00",))], JOB)
    assert (att.category, att.drain, att.restart, att.culprit_nodes) == (Category.GPU_HARDWARE, True, True,
                                                                         ("n1",))
    assert {c.kind for c in att.culprits} == {CulpritKind.NODE, CulpritKind.GPU}


def test_hardware_without_a_node_cannot_drain() -> None:
    att = attribute([anomaly(1, AnomalyKind.NODE_FAILURE)])
    assert (att.category, att.drain) == (Category.NODE_FAILURE, False)


def test_plain_precedence_hardware_over_app_over_hang() -> None:
    att = attribute([anomaly(1, AnomalyKind.HANG), anomaly(2, AnomalyKind.CRASH, category=Category.APP_ERROR),
                     anomaly(3, AnomalyKind.GPU_FAULT, nodes=("n2",))], JOB)
    assert att.category is Category.GPU_HARDWARE and att.culprit_nodes == ("n2",)


def test_app_error_blames_the_application_by_job_name() -> None:
    job = JobInfo(job_id="42", name="llama-sft", state=JobState.FAILED)
    att = attribute([anomaly(1, AnomalyKind.CRASH, category=Category.APP_ERROR, ranks=(3,))], job)
    assert (att.category, att.drain, att.restart) == (Category.APP_ERROR, False, False)
    assert [(c.kind, c.id) for c in att.culprits] == [(CulpritKind.APP, "llama-sft"), (CulpritKind.RANK, "rank 3")]


def test_signature_precedence_orders_anomalies_of_the_same_kind() -> None:
    # Both arrive as CRASH log anomalies; the catalogue says the Xid explains the timeout.
    timeout = anomaly(1, AnomalyKind.CRASH, nodes=("n1",), signature_ids=("nccl-watchdog-timeout",))
    xid = anomaly(2, AnomalyKind.CRASH, nodes=("n2",), gpus=("0000:bb:00",), signature_ids=("xid-119",))
    att = attribute([timeout, xid], JOB)
    assert (att.category, att.drain, att.culprit_nodes) == (Category.GPU_HARDWARE, True, ("n2",))
    assert att.signature_ids == ("xid-119", "nccl-watchdog-timeout")
    assert "xid-119" in att.explanation


def test_root_cause_beats_knock_on_even_when_the_knock_on_category_ranks_higher() -> None:
    # A socket-closed cascade is filed under network (precedence 80 for plain anomalies); the app error
    # is a root cause and must win.
    cascade = anomaly(1, AnomalyKind.CRASH, signature_ids=("nccl-socket-closed",))
    app = anomaly(2, AnomalyKind.CRASH, signature_ids=("python-exception",), ranks=(3,))
    att = attribute([cascade, app])
    assert (att.category, att.drain, att.restart) == (Category.APP_ERROR, False, False)


def test_signature_restart_and_drain_override_category_defaults() -> None:
    # Xid 94 is gpu-hardware but contained: restart on the same node, nothing drained.
    att = attribute([anomaly(1, AnomalyKind.GPU_FAULT, nodes=("n1",), signature_ids=("xid-94",))], JOB)
    assert (att.category, att.restart, att.drain) == (Category.GPU_HARDWARE, True, False)
    assert att.culprit_nodes == ("n1",)  # still named, for the operator, but not drained
    tl = attribute([anomaly(1, AnomalyKind.JOB_FAILED, signature_ids=("slurm-time-limit",))])
    # A time limit is the scheduler's business: Slurm ended the job on purpose; goodput does not restart it.
    assert (tl.category, tl.restart, tl.drain) == (Category.SCHEDULER_POLICY, False, False)


def test_unknown_signature_ids_fall_back_to_kind_defaults() -> None:
    a = anomaly(1, AnomalyKind.OOM, signature_ids=("not-in-catalogue",))
    assert lead_signature(a) is None and category_of(a) is Category.OOM
    att = attribute([a])
    assert (att.category, att.restart, att.drain) == (Category.OOM, False, False)


def test_explicit_category_is_respected() -> None:
    a = anomaly(1, AnomalyKind.CRASH, category=Category.STORAGE, signature_ids=("storage-estale",))
    assert category_of(a) is Category.STORAGE
    assert attribute([a]).restart is True


def test_earliest_observation_breaks_ties() -> None:
    first = anomaly(1, AnomalyKind.GPU_FAULT, nodes=("early",), signature_ids=("xid-48",))
    second = anomaly(5, AnomalyKind.GPU_FAULT, nodes=("late",), signature_ids=("xid-48",))
    att = attribute([second, first], JOB)
    assert att.culprit_nodes[0] == "early"


def test_knock_on_anomalies_of_the_same_category_do_not_add_culprits() -> None:
    port = anomaly(1, AnomalyKind.CRASH, nodes=("hx-1",), signature_ids=("nccl-ib-port-error",))
    cascade = anomaly(2, AnomalyKind.CRASH, nodes=("hx-9",), signature_ids=("nccl-socket-closed",))
    att = attribute([cascade, port], JOB)
    assert (att.category, att.drain, att.culprit_nodes) == (Category.NETWORK, True, ("hx-1",))


def test_a_straggler_without_a_host_is_reported_not_restarted() -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    slow = Anomaly(id="s1", source=AnomalySource.LOG, kind=AnomalyKind.STRAGGLER, job_id="7", ranks=(5,),
                   category=Category.STRAGGLER, observed_at=now, detected_at=now)
    verdict = attribute([slow])
    assert verdict.category is Category.STRAGGLER and not verdict.restart and not verdict.drain
    named = attribute([slow.model_copy(update={"nodes": ("node9",)})], JOB)
    assert named.drain and named.restart and named.culprit_nodes == ("node9",)


def test_log_evidence_cannot_implicate_a_node_outside_the_jobs_allocation() -> None:
    # A job printed a kernel-style Xid line naming another host: the host is reported, never drained.
    line = anomaly(1, AnomalyKind.GPU_FAULT, nodes=("gpu-victim-17",), signature_ids=("xid-79",))
    att = attribute([line], JOB)
    assert (att.category, att.drain, att.culprit_nodes) == (Category.GPU_HARDWARE, False, ())
    assert att.unverified_nodes == ("gpu-victim-17",)
    assert "gpu-victim-17" in att.explanation and "never acted on" in att.explanation


def test_log_evidence_keeps_only_the_allocated_nodes_it_names() -> None:
    both = anomaly(1, AnomalyKind.GPU_FAULT, nodes=("n2", "gpu-victim-17"), signature_ids=("xid-79",))
    att = attribute([both], JOB)
    assert (att.drain, att.culprit_nodes, att.unverified_nodes) == (True, ("n2",), ("gpu-victim-17",))


def test_without_a_scheduler_record_log_evidence_implicates_no_node() -> None:
    att = attribute([anomaly(1, AnomalyKind.GPU_FAULT, nodes=("n1",), signature_ids=("xid-79",))])
    assert (att.drain, att.culprit_nodes, att.unverified_nodes) == (False, (), ("n1",))


def test_trusted_sources_name_nodes_without_the_allocation() -> None:
    # The node agent reports its own node; operators and the scheduler watcher are trusted too.
    for source in (AnomalySource.GPU, AnomalySource.OPERATOR, AnomalySource.SCHEDULER):
        att = attribute([anomaly(1, AnomalyKind.GPU_FAULT, nodes=("n7",), source=source)])
        assert (att.drain, att.culprit_nodes, att.unverified_nodes) == (True, ("n7",), ()), source
