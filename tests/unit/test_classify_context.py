"""Tables for the judgements that need more than the failing line: where the log came from, what the
job was doing when it failed, and which line names the culprit best.

Hand-made logs (they do not count in the corpus benchmark); one table per class, each row the
smallest log that exercises the rule, plus the look-alike that must not trigger it.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures.confidence import Confidence
from goodput.diagnose.signatures.verdict import SOURCE_NODE
from goodput.models import Category, CulpritKind, RestartEffect

Row = tuple[str, list[str], Category, CulpritKind, str | None, bool, bool]

TIMEOUT = ("[rank{r}]:[E1129 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800008 "
           "milliseconds before timing out.")
STUCK = ("[rank{r}]:[E704 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank {r}] ProcessGroupNCCL's "
         "watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.")
INIT = "{h}:241:263 [{d}] NCCL INFO comm 0x55 rank {d} nranks 16 cudaDev {d} busId {d}3000 - Init COMPLETE"
RETRY = ("{h}:241:296 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.98<48598> with error 12, opcode 0, "
         "len 0, vendor err 129")


def check(rows: list[Row], name: str) -> None:
    _, log, category, kind, culprit, drain, restart = next(r for r in rows if r[0] == name)
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.culprit, v.drain, v.restart) == (category, kind, culprit, drain, restart), \
        v.explanation


# Drain is the signature's call, naming the node a separate question; a terminal session names its host.
NAMING: list[Row] = [
    ("prompt-names-the-host", ["zeyer@cn-234 ~ % nvidia-smi",
                               "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "cn-234 GPU 0000:03:00.0", True, True),
    ("no-prompt-drains-the-source-node", ["Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "GPU 0000:03:00.0", True, True),
    ("interface-suffix-is-the-node", [
        "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'gpu-a7-ib0_18_0' has failed to "
        "send a keep-alive heartbeat to the rendezvous 'none' due to an error of type RendezvousConnectionError."],
     Category.HANG, CulpritKind.NODE, "gpu-a7", False, True),
    ("port-error-named-by-its-peers", [
        "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        "...-51:73076:73185 [4] transport/net_ib.cc:1238 NCCL WARN NET/IB : Got completion from peer node48<37948> "
        "with error 12, opcode 2, len 1"],
     Category.NETWORK, CulpritKind.NODE, "node48", True, True),
    # A port error is a link event (ibv_get_async_event(3)): with no line tying it to one host, the
    # fabric is the suspect and no node is drained.
    ("port-error-with-two-peers-names-nobody", [
        "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        RETRY.format(h="n51"), RETRY.format(h="n52").replace("10.0.0.98", "10.0.0.97")],
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    # A network verdict blames the path even when no line names an end of it.
    ("network-verdict-without-an-endpoint-blames-the-path", [
        "[rank5]: torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, remote process "
        "exited or there was a network error, NCCL version 2.20.5"],
     Category.NETWORK, CulpritKind.NETWORK, None, False, True),
    ("a-timeout-without-a-culprit-still-names-nobody", [TIMEOUT.format(r=2, seq=812)],
     Category.NCCL_TIMEOUT, CulpritKind.UNKNOWN, None, False, True),
]


@pytest.mark.parametrize("name", [r[0] for r in NAMING])
def test_naming(name: str) -> None:
    check(NAMING, name)


# The culprit another line names better than the deciding one.
PLACED: list[Row] = [
    ("torchrun-root-cause-without-its-exit-code", [
        "Failures:", "[1]:", "  host      : localhost", "  rank      : 3 (local_rank: 3)",
        "  exitcode  : 1 (pid: 14692)", "[2]:", "  host      : localhost", "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -9 (pid: 14689)", "  traceback : Signal 9 (SIGKILL) received by PID 14689",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):", "[0]:", "  time      : 2026-09-07_13:02:58",
        "  host      : localhost", "  rank      : 1 (local_rank: 1)", "..."],
     Category.APP_ERROR, CulpritKind.APP, "rank 1", False, False),
    ("the-task-slurm-did-not-terminate", [
        "[2026-04-29T23:36:37.809] error: *** STEP 5.0 ON nid8 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK "
        "FAILURE ***",
        "srun: error: nid8: tasks 0-57,59-63: Terminated", "srun: Force Terminated StepId=5.0"],
     Category.APP_ERROR, CulpritKind.APP, "rank 58", False, False),
    ("task-zero-missing", ["srun: error: nid8: tasks 1-7: Terminated",
                           "slurmstepd: error: *** STEP 5.0 ON nid8 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK "
                           "FAILURE ***"],
     Category.APP_ERROR, CulpritKind.APP, "rank 0", False, False),
    ("two-tasks-missing-names-nobody", ["srun: error: nid8: tasks 0-3,5,7: Terminated",
                                        "*** STEP 5.0 ON nid8 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK "
                                        "FAILURE ***"],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    # launch.py quotes the last spawned child's command, not the dead one's (DeepSpeed v0.6.0-v0.19.5).
    ("deepspeed-launcher-names-no-rank", [
        "[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=2', "
        "'--zero_stage', '2'] exits with return code = -9"],
     Category.OOM, CulpritKind.APP, None, False, False),
    ("a-line-naming-the-stalled-rank-beats-every-ranks-monitor", [
        "[train] rank 1 stalls at iteration 5",
        "[2026-12-01 06:41:41,000] [WARNING] [RankMonServer25302@vm:0] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds.",
        "[2026-12-01 06:41:41,028] [WARNING] [RankMonServer25303@vm:1] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds."],
     Category.HANG, CulpritKind.RANK, "rank 1", False, True),
    ("every-ranks-monitor-alone-names-nobody", [
        "[2026-12-01 06:41:41,000] [WARNING] [RankMonServer25302@vm:0] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds.",
        "[2026-12-01 06:41:41,028] [WARNING] [RankMonServer25303@vm:1] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds."],
     Category.HANG, CulpritKind.UNKNOWN, None, False, True),
]


@pytest.mark.parametrize("name", [r[0] for r in PLACED])
def test_placed(name: str) -> None:
    check(PLACED, name)


# What the job was doing when it failed changes what the failure means.
CIRCUMSTANCES: list[Row] = [
    ("timeout-while-a-save-is-in-flight", [
        "2026-02-18 10:28:25,496 - root - INFO - Saving latest checkpoint model trained for 3 complete epochs",
        TIMEOUT.format(r=7, seq=1512677)],
     Category.STORAGE, CulpritKind.STORAGE, None, False, True),
    ("timeout-after-the-save-finished", [
        "saving checkpoint at iteration    2000 to /ckpt", "successfully saved checkpoint from iteration 2000 to /ckpt",
        TIMEOUT.format(r=7, seq=1512677)],
     Category.NCCL_TIMEOUT, CulpritKind.UNKNOWN, None, False, True),
    ("save-that-failed-is-not-in-flight", [
        "saving checkpoint at iteration    2000 to /ckpt",
        "OSError: [Errno 28] No space left on device: '/ckpt/iter_2000/model.pt'", TIMEOUT.format(r=1, seq=40021)],
     Category.STORAGE, CulpritKind.STORAGE, "/ckpt/iter_2000/model.pt", False, False),
    ("timeout-in-the-first-collectives", [TIMEOUT.format(r=2, seq=3)],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    ("timeout-mid-run", [TIMEOUT.format(r=2, seq=812)],
     Category.NCCL_TIMEOUT, CulpritKind.UNKNOWN, None, False, True),
    ("error-on-the-first-transfer", [INIT.format(h="h1", d=3), INIT.format(h="h1", d=2), RETRY.format(h="h1")],
     Category.NETWORK, CulpritKind.NETWORK, "h1 <-> 10.0.0.98", False, False),
    ("error-long-after-init", [INIT.format(h="h1", d=2), *(["iteration 5 | loss 2.0"] * 40), RETRY.format(h="h1")],
     Category.NETWORK, CulpritKind.NETWORK, "h1 <-> 10.0.0.98", False, True),
    # rdma-core dumps any error completion but a flush or exceeded retries: the host is named, not
    # convicted, and the first-transfer reading (a fabric setting) does not take it over.
    ("an-hca-error-completion-right-after-init-names-its-host-and-drains-nothing", [
        INIT.format(h="h1", d=2), "mlx5: h1: got completion with error:"],
     Category.NETWORK, CulpritKind.NODE, "h1", False, True),
    ("watchdog-stuck-on-several-ranks", [STUCK.format(r=2), STUCK.format(r=1)],
     Category.HANG, CulpritKind.APP, None, False, False),
    ("watchdog-stuck-after-a-timeout-is-the-timeout", [TIMEOUT.format(r=2, seq=812), STUCK.format(r=5),
                                                        STUCK.format(r=7)],
     Category.NCCL_TIMEOUT, CulpritKind.UNKNOWN, None, False, True),
    ("main-thread-waits-on-its-data-loader", [
        'Thread 0x7FA6E7C01740 (idle): "MainThread"', "    wait (threading.py:302)", "    get (queue.py:170)",
        "    __next__ (fairseq/data/iterators.py:648)", "    train (fairseq_cli/train.py:274)"],
     Category.HANG, CulpritKind.APP, None, False, False),
    ("a-background-thread-in-the-loader-is-not-the-main-thread", [
        'Thread 0x7FA6E7C01741 (idle): "pin_memory"', "    get (queue.py:170)",
        "    _next_data (torch/utils/data/dataloader.py:1329)",
        'Thread 0x7FA6E7C01740 (active): "MainThread"', "    all_reduce (torch/distributed/distributed_c10d.py:2050)"],
     Category.HANG, CulpritKind.UNKNOWN, None, False, True),
    ("interrupted-by-hand", ["WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting "
                             "down workers"],
     Category.HANG, CulpritKind.UNKNOWN, None, False, True),
    ("interrupted-after-an-exception-is-the-exception", [
        "[rank1]: KeyError: 'input_ids'",
        "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers"],
     Category.APP_ERROR, CulpritKind.APP, "rank 1", False, False),
]


@pytest.mark.parametrize("name", [r[0] for r in CIRCUMSTANCES])
def test_circumstances(name: str) -> None:
    check(CIRCUMSTANCES, name)


# Hardware against the application inside one family, and health checks.
FAMILY: list[Row] = [
    # NVIDIA's bucket for Xid 31 is RESTART_APP: the program is blamed, nothing is drained.
    ("xid-31-unrecognized-client-is-the-programs", [
        "NVRM: Xid (PCI:0000:9a:00): 31, pid=477445, name=python3, channel 0x00000002, intr 00000000.",
        "          MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d."],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    ("xid-31-then-xid-79-is-the-gpu", [
        "NVRM: Xid (PCI:0000:9a:00): 31, pid=4, name=python3, MMU Fault: UNRECOGNIZED_CLIENT",
        "NVRM: Xid (PCI:0000:9a:00): 79, pid=4, name=python3, GPU has fallen off the bus."],
     Category.GPU_HARDWARE, CulpritKind.GPU, "GPU 0000:9a:00", True, True),
    # NVIDIA's bucket for Xid 137 is IGNORE (an application's illegal peer access), and a non-fatal
    # NVLink5 event decides nothing either: reported, nothing drained (issue #25).
    ("nvlink-xid-137-after-a-nonfatal-one", [
        "kernel: NVRM: Xid (PCI:0000:1b:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (0x0)",
        "kernel: NVRM: Xid (PCI:0000:1b:00): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    ("dcgm-diag-report-row-remap", [
        "| Diagnostic                | Result                                         |",
        "| Error                     | GPU 3 has uncorrectable memory errors and row  |",
        "|                           |  remappings are pending                        |"],
     Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True, False),
    ("write-eio-is-not-retried", ["RuntimeError: write(): fd 29 failed with Input/output error"],
     Category.STORAGE, CulpritKind.STORAGE, None, False, False),
    ("read-eio-is-transient", ["OSError: [Errno 5] Input/output error: '/scratch/shard_00017.bin'"],
     Category.STORAGE, CulpritKind.STORAGE, "/scratch/shard_00017.bin", False, True),
    ("connection-refused-while-connecting-is-the-launch", [
        "h1:5971:6015 [4] NCCL INFO socketPollConnect: connect to 10.2.2.8<52333> returned Connection refused, "
        "retrying (18/34) after sleep for 1800 msec"],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
]


@pytest.mark.parametrize("name", [r[0] for r in FAMILY])
def test_family(name: str) -> None:
    check(FAMILY, name)


# Restart decisions that come from the log's circumstances rather than its cause.
def test_a_step_cancelled_before_anything_failed_is_an_owners_cancel() -> None:
    v = classify_lines([
        "[2020-12-14T09:43:55.500] [63532.0] error: *** STEP 63532.0 ON cn106 CANCELLED AT 2020-12-14T09:43:55 ***",
        "[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT "
        "2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***"])
    assert (v.category, v.culprit, v.drain, v.restart) == (Category.NODE_FAILURE, "cn106", True, False)
    assert v.restart_effect is RestartEffect.NEVER


def test_a_step_cancelled_after_a_task_failed_is_srun_tearing_it_down() -> None:
    v = classify_lines([
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python, GPU has fallen off the bus.",
        "srun: error: node12: task 3: Exited with exit code 1", "srun: Terminating StepId=55.0",
        "slurmstepd: error: *** STEP 55.0 ON node12 CANCELLED AT 2026-11-29T01:00:00 ***"])
    assert (v.restart, v.restart_effect) == (True, RestartEffect.NONE)


def test_a_health_check_is_never_restarted_even_when_it_passes_nothing() -> None:
    v = classify_lines(["| Diagnostic                | Result                                         |",
                        "| Memory                    | Pass                                           |"])
    assert (v.category, v.drain, v.restart, v.restart_effect) == (Category.UNKNOWN, False, False, RestartEffect.NEVER)


def test_every_ranks_monitor_next_to_a_weaker_hang_line_names_nobody() -> None:
    v = classify_lines([
        "[2026-12-01 06:41:41,000] [WARNING] [RankMonServer25302@vm:0] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds.",
        "[2026-12-01 06:41:41,028] [WARNING] [RankMonServer25303@vm:1] Did not get subsequent heartbeat. Waited 5.00 "
        "seconds.",
        'Thread 61133 (active): "MainThread"'])
    assert (v.category, v.culprit_kind, v.culprit) == (Category.HANG, CulpritKind.UNKNOWN, None)


@pytest.mark.parametrize(("log", "mentions"), [
    (["*** STEP 5.0 ON nid8 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK FAILURE ***",
      "srun: error: nid8: tasks 0-2,4-7: Terminated"], "task 3's own output"),
    (["...-48:34050:34121 [0] NCCL WARN NET/IB : Got async event : port error",
      "n51:73076:73185 [4] NCCL WARN NET/IB : Got completion from peer node48<37948> with error 12, opcode 2"],
     "ibstat"),
])
def test_a_culprit_read_off_other_lines_is_medium_confidence(log: list[str], mentions: str) -> None:
    v = classify_lines(log)
    assert v.confidence is Confidence.MEDIUM and v.settle is not None and mentions in v.settle, v.settle


def test_an_application_fault_names_no_node_in_the_live_anomaly() -> None:
    from datetime import UTC, datetime

    from goodput.diagnose.classify import anomaly_from_verdict

    v = classify_lines(["MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x1"])
    now = datetime.now(UTC)
    anomaly = anomaly_from_verdict(v, anomaly_id="a1", job_id="7", observed_at=now, detected_at=now, host="gpu-3")
    assert (v.culprit_kind, v.drain, anomaly.nodes) == (CulpritKind.APP, False, ())
