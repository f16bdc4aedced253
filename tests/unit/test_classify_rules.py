"""The weighing rules of `classify_lines`, one small log per rule."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from goodput.diagnose.classify import anomaly_from_verdict, classify_lines, iter_lines
from goodput.diagnose.signatures.confidence import Confidence
from goodput.diagnose.signatures.verdict import SOURCE_NODE
from goodput.models import AnomalyKind, Category, CulpritKind
from goodput.scheduler import JobInfo, JobState

XID79 = "Nov 29 07:41:02 {host} kernel: NVRM: Xid (PCI:0000:{bus}:00): 79, GPU has fallen off the bus."
TIMEOUT = ("[rank{r}]:[E1129 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600047 milliseconds before timing out.")
ABORT = "[rank{r}]: Some NCCL operations have failed or timed out."


def test_hardware_beats_an_earlier_application_symptom() -> None:
    v = classify_lines([TIMEOUT.format(r=0), ABORT.format(r=0), XID79.format(host="hx-4", bus="3b")])
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit_kind, v.culprit, v.host, v.gpu) == (CulpritKind.GPU, "hx-4 GPU 0000:3b:00", "hx-4",
                                                          "0000:3b:00")
    assert v.drain and v.restart
    assert v.signatures[0] == "xid-79"


def test_the_first_failing_rank_is_the_culprit() -> None:
    v = classify_lines([" 5: ValueError: bad shape", " 2: KeyError: 'x'", "srun: error: hx-2: task 5: Exited "
                        "with exit code 1"])
    assert (v.category, v.culprit, v.rank, v.host) == (Category.APP_ERROR, "rank 5", 5, "hx-2")
    assert not v.drain and not v.restart
    assert "application is at fault" in v.explanation


def test_knock_on_effects_alone_do_not_invent_a_culprit() -> None:
    v = classify_lines([ABORT.format(r=3), "slurmstepd: error: *** STEP 1.0 ON hx-1 FAILED (non-zero exit "
                        "code or other failure mode) ***"])
    assert v.category is Category.NCCL_TIMEOUT
    assert (v.culprit_kind, v.culprit, v.drain) == (CulpritKind.UNKNOWN, None, False)
    assert "No root-cause signature" in v.explanation


def test_only_timeouts_name_no_culprit_and_do_not_drain() -> None:
    v = classify_lines([TIMEOUT.format(r=r) for r in range(4)])
    assert (v.category, v.culprit, v.restart, v.drain) == (Category.NCCL_TIMEOUT, None, True, False)


def test_informational_xid_never_outranks_a_real_cause() -> None:
    v = classify_lines(["Nov 29 07:41:02 hx-1 kernel: NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper: New row "
                        "marked for remapping, reset gpu to activate.", " 1: KeyError: 'x'"])
    assert v.category is Category.APP_ERROR
    # Alone, an informational line is reported but decides nothing: no failure, no action.
    only_info = classify_lines(["Nov 29 07:41:02 hx-1 kernel: NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper"])
    assert (only_info.category, only_info.drain, only_info.restart, only_info.culprit) == (
        Category.UNKNOWN, False, False, None)
    assert only_info.signatures == ("xid-63",) and "No failure" in only_info.explanation


def test_errors_after_a_time_limit_are_teardown() -> None:
    v = classify_lines([
        "slurmstepd: error: *** JOB 9 ON hx-1 CANCELLED AT 2026-11-29T00:00:00 DUE TO TIME LIMIT ***",
        "[rank0]: RuntimeError: store->get('1') got error: Connection reset by peer",
        TIMEOUT.format(r=1)])
    assert v.category is Category.SCHEDULER_POLICY
    assert not v.restart and not v.drain  # the scheduler's decision: not restarted by goodput
    assert "teardown" in v.explanation


def test_an_application_error_before_a_cancel_still_wins() -> None:
    v = classify_lines([" 0: ZeroDivisionError: division by zero",
                        "slurmstepd: error: *** JOB 9 ON hx-1 CANCELLED AT 2026-11-29T00:00:00 ***"])
    assert v.category is Category.APP_ERROR


def test_a_gpu_fault_without_a_host_drains_the_node_that_produced_the_log() -> None:
    # A bare dmesg names the GPU: drain the node the log came from (the live service knows it).
    v = classify_lines(["[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."])
    assert (v.culprit_kind, v.culprit, v.drain, v.host) == (CulpritKind.GPU, "GPU 0000:3b:00", True, None)
    assert "drain the node this log was taken from" in v.explanation
    # Whether to drain does not depend on whether the log spells a host or a GPU.
    nameless = classify_lines(["RuntimeError: CUDA error: uncorrectable ECC error encountered"])
    assert (nameless.category, nameless.culprit_kind, nameless.culprit, nameless.drain) == (
        Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True)
    assert "drain the node this log was taken from" in nameless.explanation


def test_rank_is_mapped_to_host_through_srun_task_lines() -> None:
    v = classify_lines(["12: RuntimeError: CUDA error: uncorrectable ECC error encountered",
                        "srun: error: hx-7: task 12: Aborted"])
    assert (v.culprit_kind, v.culprit, v.drain, v.rank) == (CulpritKind.NODE, "hx-7", True, 12)


def test_slurm_banner_host_is_not_the_failed_node() -> None:
    v = classify_lines(["slurmstepd: error: *** STEP 3.0 ON hx-1 CANCELLED AT 2026-11-29T00:00:00 DUE TO NODE "
                        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"])
    assert v.category is Category.NODE_FAILURE
    assert v.culprit is None and not v.drain and "does not name the failed node" in v.explanation


def test_evidence_is_bounded_and_clipped() -> None:
    lines = [TIMEOUT.format(r=r) + " " + "x" * 5000 for r in range(500)]
    v = classify_lines(lines)
    assert 1 <= len(v.evidence) <= 8
    assert all(len(e.text) < 600 for e in v.evidence)


def test_iter_lines_handles_crlf_invalid_utf8_and_overlong_lines() -> None:
    data = b"a\r\n\xff\xfeb\n" + b"z" * 1_000_000 + b"\nlast"
    assert list(iter_lines(io.BytesIO(data))) == ["a", "\ufffd\ufffdb", "z" * 262144, "last"]


def test_anomaly_from_verdict_feeds_attribution() -> None:
    from goodput.diagnose.attribution import attribute

    v = classify_lines([TIMEOUT.format(r=0), XID79.format(host="hx-4", bus="3b")])
    now = datetime(2026, 11, 29, tzinfo=UTC)
    a = anomaly_from_verdict(v, anomaly_id="log-1", job_id="77", observed_at=now, detected_at=now)
    assert (a.kind, a.nodes, a.gpus, a.category) == (AnomalyKind.GPU_FAULT, ("hx-4",), ("0000:3b:00",),
                                                     Category.GPU_HARDWARE)
    job = JobInfo(job_id="77", state=JobState.FAILED, nodes=("hx-3", "hx-4"))
    att = attribute([a], job)
    assert (att.category, att.drain, att.culprit_nodes) == (Category.GPU_HARDWARE, True, ("hx-4",))


def test_nccl_init_lines_join_a_global_rank_to_its_host_and_gpu() -> None:
    init = "{h}:1:1 [5] NCCL INFO comm 0x5{c} rank {r} nranks {n} cudaDev 5 busId bb000 commId 0x9 - Init COMPLETE"
    v = classify_lines([
        init.format(h="hx-2", c=1, r=13, n=16),
        init.format(h="hx-1", c=2, r=13, n=8),  # a sub-communicator: its rank 13 is not global rank 13
        "[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered"])
    assert (v.culprit_kind, v.culprit, v.host, v.gpu, v.drain) == (CulpritKind.GPU, "hx-2 GPU 0000:bb:00.0", "hx-2",
                                                                    "0000:bb:00.0", True)


def test_nccl_host_prefix_names_the_node() -> None:
    v = classify_lines(["hx-5:881:905 [1] NCCL WARN Cuda failure 214 'uncorrectable ECC error encountered'"])
    assert (v.category, v.culprit_kind, v.culprit, v.drain) == (Category.GPU_HARDWARE, CulpritKind.NODE, "hx-5",
                                                                True)


def test_an_unknown_cuda_error_names_its_host_and_leaves_the_drain_to_the_driver() -> None:
    # CUDA documents 999 as an unknown internal error: the Xid on hx-5, not this line, decides a drain.
    v = classify_lines(["hx-5:881:905 [1] NCCL WARN Cuda failure 999 'unknown error'"])
    assert (v.category, v.culprit, v.drain, v.restart) == (Category.GPU_HARDWARE, "hx-5", False, True)
    assert v.confidence is not Confidence.HIGH


def test_pdsh_host_prefix_names_the_host_of_an_application_error() -> None:
    v = classify_lines(["worker-3: [rank9]: AssertionError: loss went negative"])
    assert (v.category, v.culprit, v.host, v.rank) == (Category.APP_ERROR, "rank 9", "worker-3", 9)


def test_lost_connections_are_consequences_not_application_errors() -> None:
    v = classify_lines(["[rank3]: torch.distributed.DistNetworkError: Connection reset by peer",
                        "[rank4]: RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.3]:27823"])
    assert v.category is Category.NETWORK and v.culprit is None and not v.drain
    assert v.signatures == ("dist-connection-lost",)


WD = ("[rank{r}]:[E1129 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, "
      "Timeout(ms)=600000) ran for 600001 ms")


def test_timeouts_that_disagree_on_the_collective_are_an_application_desync() -> None:
    lines = [WD.format(r=r, seq=77, op="ALLREDUCE", n=4096) for r in (0, 1, 2, 4, 5)]
    lines.append(WD.format(r=3, seq=77, op="BROADCAST", n=4096))
    v = classify_lines(lines)
    assert (v.category, v.culprit_kind, v.culprit, v.restart, v.drain) == (
        Category.APP_ERROR, CulpritKind.APP, "rank 3", False, False)
    assert v.signatures[0] == "nccl-collective-mismatch"


def test_same_sequence_number_in_different_process_groups_is_not_a_mismatch() -> None:
    pg = ("[rank{r}]:[E1129 x] [PG ID {pg} PG GUID 1(x) Rank 0] Process group watchdog thread terminated with "
          "exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType={op}, "
          "NumelIn=8, NumelOut=8, Timeout(ms)=1)")
    v = classify_lines([pg.format(r=0, pg=1, op="ALLREDUCE"), pg.format(r=1, pg=2, op="_ALLGATHER_BASE")])
    assert v.category is Category.NCCL_TIMEOUT


def test_matching_timeouts_stay_an_nccl_timeout() -> None:
    v = classify_lines([WD.format(r=r, seq=9, op="ALLREDUCE", n=1) for r in range(4)])
    assert v.category is Category.NCCL_TIMEOUT and v.culprit is None


def test_without_process_group_ids_the_timeouts_form_one_group() -> None:
    # Old builds print no PG id; one job rarely times out in two groups at the same sequence number,
    # so different operations at one SeqNum still mean the ranks ran different collectives.
    lines = [TIMEOUT.format(r=r) for r in range(3)]
    lines.append(TIMEOUT.format(r=3).replace("OpType=ALLREDUCE", "OpType=BROADCAST"))
    v = classify_lines(lines)
    assert (v.category, v.culprit, v.restart) == (Category.APP_ERROR, "rank 3", False)


def test_the_live_path_carries_the_deciding_rule_and_its_confidence_into_the_attribution() -> None:
    from goodput.diagnose.attribution import attribute

    v = classify_lines([TIMEOUT.format(r=0), XID79.format(host="hx-4", bus="3b")])
    now = datetime(2026, 11, 29, tzinfo=UTC)
    a = anomaly_from_verdict(v, anomaly_id="log-1", job_id="77", observed_at=now, detected_at=now)
    att = attribute([a], JobInfo(job_id="77", state=JobState.FAILED, nodes=("hx-3", "hx-4")))
    assert (att.rule, att.confidence) == (v.signatures[0], str(v.confidence))
    assert att.rule.startswith("xid-") and att.confidence == "high"
    unsigned = a.model_copy(update={"signature_ids": (), "confidence": None})
    assert (attribute([unsigned]).rule, attribute([unsigned]).confidence) == ("category:gpu-hardware", None)
