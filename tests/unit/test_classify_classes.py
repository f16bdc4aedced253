"""One table per class of judgement the diagnosis issue names, over small hand-made logs.

These are unit tests (they do not count in the corpus benchmark): each row is the smallest log
that exercises one rule, with the decision a careful engineer would take.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures.confidence import Confidence
from goodput.diagnose.signatures.verdict import SOURCE_NODE
from goodput.models import Category, CulpritKind

TIMEOUT = ("[rank{r}]:[E1129 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for "
           "600010 milliseconds before timing out.")
XID = "Nov 29 07:41:02 {h} kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, pid={pid}, name=python, {tail}"
SUMMARY = ["Failures:", "[1]:", "  host      : n2", "  rank      : 0 (local_rank: 0)",
           "  exitcode  : -9 (pid: 11)", "  traceback : Signal 9 (SIGKILL) received by PID 11",
           "------------------------------------------------------------",
           "Root Cause (first observed failure):", "[0]:", "  host      : n1", "  rank      : 5 (local_rank: 1)",
           "  exitcode  : 1 (pid: 12)"]

# (name, log, category, culprit kind, culprit, drain, restart)
CASES: list[tuple[str, list[str], Category, CulpritKind, str | None, bool, bool]] = [
    # Drain does not depend on the log spelling the host.
    ("ecc-without-host", ["RuntimeError: CUDA error: uncorrectable ECC error encountered"],
     Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True, True),
    ("ecc-on-a-rank", ["[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: "
                       "CUDA error: uncorrectable ECC error encountered"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "the gpu of rank 1", True, True),
    ("fabric-manager-802", ["RuntimeError: CUDA error: system not yet initialized"],
     Category.NVLINK, CulpritKind.NODE, SOURCE_NODE, True, True),
    ("node-failure-banner-names-nothing",
     ["slurmstepd: error: *** JOB 7 ON batch-1 CANCELLED AT 2026-11-29T00:00:00 DUE TO NODE FAILURE ***"],
     Category.NODE_FAILURE, CulpritKind.NODE, None, False, True),
    # Culprits named from prefixes.
    ("kernel-host-and-pci", [XID.format(h="gpu-b17", bus="9a", code=79, pid=1, tail="GPU has fallen off the bus.")],
     Category.GPU_HARDWARE, CulpritKind.GPU, "gpu-b17 GPU 0000:9a:00", True, True),
    ("torchrun-root-cause-not-the-teardown", SUMMARY,
     Category.APP_ERROR, CulpritKind.APP, "rank 5", False, False),
    ("ib-port-error-names-the-host", [
        "ib-7:11:21 [0] NCCL INFO NET/IB : Got async event : port error",
        "ib-2:11:21 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<52221> "
        "with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.7"],
     Category.NETWORK, CulpritKind.NODE, "ib-7", True, True),
    ("open-mpi-tags-and-nccl-host", [
        "2019-06-02T16:13:44.884Z: [1,12]<stdout>:c-57:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : "
        "Got async event : local catastrophic error"],
     Category.NETWORK, CulpritKind.NODE, "c-57", True, True),
    ("single-node-local-rank", [
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 8) of "
        "binary: /usr/bin/python"],
     Category.OOM, CulpritKind.APP, "rank 3", False, False),
    ("xid-45-names-its-nvlink-cause", [
        XID.format(h="h1", bus="dc", code=45, pid=9, tail="Ch 00000001 caused by previous Xid 74")],
     Category.NVLINK, CulpritKind.NODE, "h1", True, True),
    ("spank-prolog-error-on-a-node", [
        "Feb 22 17:46:38 ip-10-1-74-228 slurmd[13562]: spank-epilog: error: pyxis: mkdir: Permission denied"],
     Category.NODE_FAILURE, CulpritKind.NODE, "ip-10-1-74-228", True, True),
    # Knock-on effects are not causes.
    ("exception-then-timeouts", [" 3: KeyError: 'input_ids'", TIMEOUT.format(r=0), TIMEOUT.format(r=1),
                                 "Sending process 11 closing signal SIGTERM"],
     Category.APP_ERROR, CulpritKind.APP, "rank 3", False, False),
    ("silent-rank", [TIMEOUT.format(r=r) for r in (0, 1, 3, 4)],
     Category.NCCL_TIMEOUT, CulpritKind.RANK, "rank 2", False, True),
    ("different-collectives-at-one-seqnum",
     [TIMEOUT.format(r=r) for r in (0, 1, 2)] + [TIMEOUT.format(r=3).replace("ALLREDUCE", "BROADCAST")],
     Category.APP_ERROR, CulpritKind.APP, "rank 3", False, False),
    ("nccl-oom-beats-peer-socket-errors", [
        "n1:5:9 [1] NCCL WARN Connection closed by remote peer n2<5555>",
        "n2:7:8 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'"],
     Category.OOM, CulpritKind.APP, None, False, False),
    # Hangs without an error line.
    ("faulthandler-dump", ["Timeout (0:30:00)!", "Thread 0x00007f (most recent call first):",
                           '  File "train.py", line 10 in step'],
     Category.HANG, CulpritKind.RANK, None, False, True),
    # Every rank of a stalled job prints the heartbeat line: one of them names nobody; several at once,
    # with no timeout or hardware error, are the program deadlocked.
    ("heartbeat-on-one-rank", ["[rank6]:[E1129] [PG ID 0 PG GUID 0 Rank 6] ProcessGroupNCCL's watchdog got stuck "
                               "for 480 seconds without making progress"],
     Category.HANG, CulpritKind.UNKNOWN, None, False, True),
    ("heartbeat-on-every-rank", [f"[rank{r}]:[E1129] [PG ID 0 PG GUID 0 Rank {r}] ProcessGroupNCCL's watchdog got "
                                 "stuck for 480 seconds" for r in (0, 1, 2)],
     Category.HANG, CulpritKind.APP, None, False, False),
    ("stuck-in-the-nvidia-driver", [
        "Nov 29 07:41:02 h7 kernel: task:python3.11      state:D stack:    0 pid:15277 ppid: 15257",
        "Nov 29 07:41:02 h7 kernel:  mutex_lock+0x34/0x40",
        "Nov 29 07:41:02 h7 kernel:  uvm_ioctl+0x13e0/0x16f0 [nvidia_uvm]"],
     Category.HANG, CulpritKind.NODE, "h7", True, True),
    ("stuck-in-a-filesystem-is-not-the-gpu", [
        "Nov 29 07:41:02 h7 kernel: task:python3.11      state:D stack:    0 pid:15277 ppid: 15257",
        "Nov 29 07:41:02 h7 kernel:  nfs_wait_bit_killable+0x20/0x90 [nfs]"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    # Hardware versus application inside one family.
    ("xid-13-alone-is-the-app", [XID.format(h="h1", bus="3b", code=13, pid=7, tail="Graphics Exception")],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    ("xid-31-under-many-processes-is-the-gpu",
     [XID.format(h="h1", bus="db", code=31, pid=p, tail="MMU Fault: ENGINE GRAPHICS") for p in (7, 8, 9)],
     Category.GPU_HARDWARE, CulpritKind.GPU, "h1 GPU 0000:db:00", True, True),
    ("oom-next-to-ecc", ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                         "RuntimeError: CUDA error: uncorrectable ECC error encountered"],
     Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True, True),
    # Restart decisions.
    ("bootstrap-misconfiguration", [
        "n1:4:4 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.20.10<43369> failed : "
        "Software caused connection abort"],
     Category.NETWORK, CulpritKind.NETWORK, "n1 <-> 169.254.20.10", False, False),
    ("import-error", ["ModuleNotFoundError: No module named 'flash_attn'"],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    ("time-limit", ["slurmstepd: error: *** JOB 9 ON ... CANCELLED AT 2026-11-29T00:00:00 DUE TO TIME LIMIT ***"],
     Category.SCHEDULER_POLICY, CulpritKind.APP, None, False, False),
    ("elastic-restarted-in-job", [
        XID.format(h="h1", bus="3b", code=79, pid=7, tail="GPU has fallen off the bus."),
        "[default] Worker group FAILED. 2/3 attempts left; will restart worker group"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "h1 GPU 0000:3b:00", True, False),
    ("elastic-gave-up-after-restarting", [
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "[default] Worker group FAILED. 1/3 attempts left; will restart worker group",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"],
     Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True, True),
    ("nvrx-exit-93", ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
                      "[default] Agent's exit code = 93"],
     Category.GPU_HARDWARE, CulpritKind.NODE, SOURCE_NODE, True, False),
    ("user-cancel-after-an-unkillable-step", [
        "slurmstepd: error: *** STEP 5.0 STEPD TERMINATED ON cn106 AT 2026-11-29T01:00:00 DUE TO JOB NOT ENDING "
        "WITH SIGNALS ***", "slurmstepd: error: *** JOB 5 ON cn106 CANCELLED AT 2026-11-29T00:59:00 ***"],
     Category.NODE_FAILURE, CulpritKind.NODE, "cn106", True, False),
    ("srun-tears-the-step-down-after-a-gpu-fault", [
        XID.format(h="node12", bus="3b", code=79, pid=7, tail="GPU has fallen off the bus."),
        "srun: error: node12: task 3: Exited with exit code 1", "srun: Terminating StepId=55.0",
        "slurmstepd: error: *** STEP 55.0 ON node12 CANCELLED AT 2026-11-29T01:00:00 ***"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "node12 GPU 0000:3b:00", True, True),
    ("nvrx-killed-a-hung-rank-then-gave-up", [
        "[ft_launcher12@n1] Did not get subsequent heartbeat. Waited 5.00 seconds.",
        "failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python",
        "[default] Worker group FAILED. 1/1 attempts left; will restart worker group",
        "Some rank(s) exited with non-zero exit code: {1: -9}. Agent's exit code = 1"],
     Category.HANG, CulpritKind.RANK, "rank 1", False, True),
    ("nvrx-restarted-a-hung-rank-in-job", [
        "[ft_launcher12@n1] Did not get subsequent heartbeat. Waited 5.00 seconds.",
        "failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python",
        "[default] Worker group FAILED. 1/1 attempts left; will restart worker group"],
     Category.HANG, CulpritKind.RANK, "rank 1", False, False),
    ("nvrx-no-progress-93", [
        "Training cycle #2 made NO progress (iteration 120 -> 120)",
        "EARLY TERMINATION: the launcher decided the job must not be restarted (no_progress). Agent's exit code = 93"],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    ("a-worker-exit-status-then-its-peers-lose-the-connection", [
        "E1201 06:47:12.003000 26251 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 7) "
        "local_rank: 1 (pid: 26258) of binary: /usr/bin/python",
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:5555",
        "2026-12-01 06:47:12,004 [INFO] [vm] [workload:?(?) infra:?(?)] launcher.py:636 [default] Worker group "
        "UNHEALTHY. 2/2 attempts left; will restart worker group"],
     Category.APP_ERROR, CulpritKind.APP, "rank 1", False, False),
    ("shm-too-small", ["RuntimeError: DataLoader worker (pid 4) is killed by signal: Bus error. It is possible "
                       "that dataloader's workers are out of shared memory."],
     Category.APP_ERROR, CulpritKind.APP, None, False, False),
    # Benign noise stays benign.
    ("xid-63-alone", [XID.format(h="h1", bus="3b", code=63, pid=7, tail="Row Remapper: New row marked")],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    ("warnings-and-loss-spike", ["UserWarning: torch.cuda.amp.GradScaler(args...) is deprecated.",
                                 "step 900 | loss 7.91 (spike) | lr 3e-4", "step 901 | loss 2.10"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
    ("nvidia-smi-no-remap-failure", ["        Remapping Failure Occurred        : No"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, False),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "culprit", "drain", "restart"), CASES,
                         ids=[c[0] for c in CASES])
def test_class(name: str, log: list[str], category: Category, kind: CulpritKind, culprit: str | None,
               drain: bool, restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.culprit, v.drain, v.restart) == (category, kind, culprit, drain, restart), \
        v.explanation


@pytest.mark.parametrize(("log", "confidence", "settle_mentions"), [
    ([XID.format(h="gpu-b17", bus="9a", code=79, pid=1, tail="GPU has fallen off the bus.")], Confidence.HIGH, None),
    (["RuntimeError: CUDA error: uncorrectable ECC error encountered"], Confidence.MEDIUM, "watcher or push"),
    ([TIMEOUT.format(r=r) for r in (0, 1)], Confidence.LOW, "flight recorder"),
    ([TIMEOUT.format(r=r) for r in (0, 1, 3, 4)], Confidence.MEDIUM, "did not report"),
    (["Sending process 11 closing signal SIGTERM"], Confidence.LOW, "first error"),
    (["step 1 | loss 2.0"], Confidence.LOW, "sacct"),
])
def test_confidence_and_what_would_settle_it(log: list[str], confidence: Confidence,
                                             settle_mentions: str | None) -> None:
    v = classify_lines(log)
    assert v.confidence is confidence
    if settle_mentions is None:
        assert v.settle is None
    else:
        assert v.settle is not None and settle_mentions in v.settle


def test_a_silent_rank_is_found_without_building_the_range_a_hostile_line_claims() -> None:
    lines = [TIMEOUT.format(r=r) for r in (0, 1, 2)] + [TIMEOUT.format(r=999_999_999)]
    v = classify_lines(lines)  # no gap analysis over a billion ranks: max rank != number of reporters
    assert (v.category, v.culprit) == (Category.NCCL_TIMEOUT, None)
    assert classify_lines([TIMEOUT.format(r=r) for r in (1, 2, 3)]).culprit == "rank 0"
