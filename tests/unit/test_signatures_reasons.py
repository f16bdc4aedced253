"""Slurm's node reasons and job states, NCCL's RAS report and PyTorch's documented distributed errors.

Each line is in the format the vendor documents (Slurm's man pages and guides, NCCL's RAS chapter and
its ncclras client, PyTorch's torch.distributed pages); each verdict follows the documented meaning.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.confidence import Confidence
from goodput.models import Category, CulpritKind

CAT = default_catalogue()

# (line, signature id, groups it must read)
REASON_LINES: list[tuple[str, str, dict[str, str]]] = [
    # Slurm node reasons (scontrol show node, sinfo -R, slurmctld's log)
    ("slurmstepd: error: execve(): bad interpreter(/nonexistent/shell): No such file or directory",
     "slurmstepd-bad-interpreter", {"detail": "/nonexistent/shell"}),
    ("srun: error: Task launch for StepId=9.0 failed on node hx-5: Slurmd could not execve job",
     "slurm-launch-failed-program", {}),
    ("srun: error: Task launch for StepId=9.0 failed on node hx-5: Communication connection failure",
     "slurm-launch-failed-other", {"host": "hx-5"}),
    ("   Reason=Not responding [slurm@2026-11-29T00:00:00]", "slurm-node-not-responding", {}),
    ("[2026-11-29T00:00:00.123] error: Nodes gpu07 not responding", "slurm-node-not-responding", {"host": "gpu07"}),
    ("[2026-11-29T00:00:00.123] error: Nodes node[00,03,25] not responding", "slurm-node-not-responding", {}),
    ("   Reason=batch job complete failure [slurm@2026-11-29T00:00:00]", "slurm-batch-complete-failure", {}),
    ("   Reason=Kill task failed [root@2026-11-29T00:00:00]", "slurm-unkillable-step", {}),
    ("   Reason=Prolog error [root@2026-11-29T00:00:00]", "slurm-prolog-failure", {}),
    ("   Reason=Epilog error [root@2026-11-29T00:00:00]", "slurm-prolog-failure", {}),
    # squeue's reason for a job held after a failed prolog; slurmd's credential check
    ("  4242  gpu  train  alice PD  0:00  4 (launch failed requeued held)", "slurm-launch-failed-held", {}),
    ("slurmd[812]: error: Invalid job credential from 10.0.0.1: Job credential expired",
     "slurm-credential-expired", {}),
    # Job state codes, as scontrol show job and sacct print them
    ("4242            train    gpu        TIMEOUT      0:0", "slurm-state-timeout", {}),
    ("   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)", "slurm-state-timeout", {}),
    ("4242            train    gpu      PREEMPTED      0:0", "slurm-state-preempted", {}),
    ("4242            train    gpu       DEADLINE      0:0", "slurm-state-deadline", {}),
    ("   JobState=BOOT_FAIL Reason=NodeDown Dependency=(null)", "slurm-state-boot-fail", {}),
    # PyTorch (torch.distributed, TorchElastic)
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float), but "
     "Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1, OpType=REDUCE_SCATTER, "
     "TensorShape=[20, 10], TensorDtypes=Float).", "torch-debug-collective-mismatch", {}),
    ("RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms", "torch-monitored-barrier-failed",
     {"ranks": "1"}),
    ("RuntimeError: Ranks 1, 2 failed to pass monitoredBarrier in 2000 ms", "torch-monitored-barrier-failed",
     {"ranks": "1, 2"}),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "torch-rendezvous-timeout", {}),
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "torch-rendezvous-closed", {}),
    # NCCL RAS: the ncclras report and a monitor-mode event
    ("  1 job process is considered dead (unreachable via the RAS network)", "nccl-ras-dead", {}),
    ("  2 job processes are considered dead (unreachable via the RAS network)", "nccl-ras-dead", {}),
    ("[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1", "nccl-ras-dead",
     {"host": "172.16.64.245"}),
    ("  Missing communicator data from 1 job process", "nccl-ras-incomplete", {}),
    ("  Missing communicator data from 3 ranks", "nccl-ras-incomplete", {}),
    ("  The missing rank: 21", "nccl-ras-incomplete", {"ranks": "21"}),
    ("  Process 3487984 on node 172.16.64.213 managing GPU 5", "nccl-ras-process", {"host": "172.16.64.213"}),
]

NEAR_MISSES = [
    "Node node00 now responding",
    "nfs: server fs1 not responding, still trying",
    "4242            train    gpu      COMPLETED      0:0",
    # ncclras's warning heading (timeouts while gathering), and a transitional status listing.
    "  TIMEOUT",
    "    Encountered 2 communication timeouts while gathering communicator data",
    "    Rank 4 -- GPU 4 managed by process 507289 on node 172.16.64.210",
    "      0         8         4         1         4        32   RUNNING      OK",
    "NCCL_TIMEOUT=1800 set by environment",
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), REASON_LINES, ids=[c[1] for c in REASON_LINES])
def test_reason_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    hits = {m.signature.id: m for m in CAT.match_line(line, 1)}
    assert sig_id in hits, sorted(hits)
    for key, value in groups.items():
        assert hits[sig_id].groups.get(key) == value, key
    assert CAT.might_match(line)


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_reason_near_misses(line: str) -> None:
    # An NFS server that does not answer is the storage's, reported (netfs-io-waits), never Slurm's node.
    assert [m.signature.id for m in CAT.match_line(line, 1) if m.signature.id != "netfs-io-waits"] == []


def test_every_new_rule_names_its_vendor_document() -> None:
    ids = {sig_id for _, sig_id, _ in REASON_LINES}
    for sig_id in ids:
        sig = CAT.get(sig_id)
        assert sig is not None and sig.source, sig_id


# (name, log, category, culprit kind, culprit, drain, restart, confidence)
VERDICTS: list[tuple[str, list[str], Category, CulpritKind, str | None, bool, bool, Confidence]] = [
    # Slurm set the node DOWN itself; the job is rerun without it.
    ("not-responding", ["[2026-11-29T00:00:00.123] error: Nodes gpu07 not responding"],
     Category.NODE_FAILURE, CulpritKind.NODE, "gpu07", False, True, Confidence.HIGH),
    # Slurm ended the job on its clock: policy, no restart; the state does not say whether it hung.
    ("sacct-timeout", ["4242            train    gpu        TIMEOUT      0:0"],
     Category.SCHEDULER_POLICY, CulpritKind.APP, None, False, False, Confidence.MEDIUM),
    ("boot-fail", ["   JobState=BOOT_FAIL Reason=NodeDown Dependency=(null)"],
     Category.NODE_FAILURE, CulpritKind.UNKNOWN, None, False, True, Confidence.MEDIUM),
    ("launch-failed-held", ["  4242  gpu  train  alice PD  0:00  4 (launch failed requeued held)"],
     Category.NODE_FAILURE, CulpritKind.UNKNOWN, None, False, True, Confidence.MEDIUM),
    # srun's launch failure: Slurm's own error string after the colon says whose it is (slurm_errno.c).
    ("launch-failed-node-user-db", ["srun: error: Task launch for StepId=77.0 failed on node hx-5: User not found on "
                                    "host"],
     Category.NODE_FAILURE, CulpritKind.NODE, "hx-5", True, True, Confidence.HIGH),
    ("launch-failed-prolog", ["srun: error: Task launch for 23.0 failed on node gpu-3: Job prolog failed"],
     Category.NODE_FAILURE, CulpritKind.NODE, "gpu-3", True, True, Confidence.HIGH),
    # The job's own program cannot be run: whatever node it names, nothing is drained (a user can make
    # any launch fail this way), and an unchanged rerun fails the same.
    ("launch-failed-execve", ["srun: error: Task launch for StepId=77.0 failed on node hx-5: Slurmd could not "
                              "execve job"], Category.APP_ERROR, CulpritKind.APP, None, False, False, Confidence.HIGH),
    ("launch-failed-output-file", ["srun: error: Task launch for StepId=77.0 failed on node hx-5: could not open "
                                   "output file"], Category.APP_ERROR, CulpritKind.APP, None, False, False,
     Confidence.HIGH),
    # A reason that does not say the node is broken: restarted, not drained, not settled.
    ("launch-failed-connection", ["srun: error: Task launch for StepId=77.0 failed on node hx-5: Communication "
                                  "connection failure"], Category.NODE_FAILURE, CulpritKind.NODE, "hx-5", False, True,
     Confidence.MEDIUM),
    # slurmstepd's exec_task: a script it cannot open is gone from the node's spool (the node's); a script whose
    # `#!` interpreter is missing is reported as a bad interpreter (the job's own script, drained nowhere).
    ("batch-script-missing-from-spool", ["Dec  3 10:41:02 gpu-b07 slurmstepd[4411]: error: execve(): /var/spool/"
                                         "slurmd/job4411/slurm_script: No such file or directory"],
     Category.NODE_FAILURE, CulpritKind.NODE, "gpu-b07", True, True, Confidence.HIGH),
    ("batch-script-bad-interpreter", ["Dec  3 10:41:02 gpu-b07 slurmstepd[4411]: error: execve(): bad interpreter"
                                      "(/bin/bash\r): No such file or directory"],
     Category.APP_ERROR, CulpritKind.APP, None, False, False, Confidence.HIGH),
    # PyTorch's own collective check: an application bug, settled by PyTorch's documentation.
    ("collective-mismatch", [next(line for line, sig, _ in REASON_LINES if sig == "torch-debug-collective-mismatch")],
     Category.APP_ERROR, CulpritKind.APP, None, False, False, Confidence.HIGH),
    # The rank that never reached the barrier is named; why it stopped is not.
    ("monitored-barrier", ["RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms"],
     Category.HANG, CulpritKind.RANK, "rank 1", False, True, Confidence.MEDIUM),
    # A closed rendezvous is another agent giving up: a consequence, never the cause.
    ("rendezvous-closed", ["torch.distributed.elastic.rendezvous.api.RendezvousClosedError"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, None, False, True, Confidence.LOW),
    ("rendezvous-closed-after-a-cause", ["[rank3]: ValueError: bad shape",
                                         "torch.distributed.elastic.rendezvous.api.RendezvousClosedError"],
     Category.APP_ERROR, CulpritKind.APP, "rank 3", False, False, Confidence.MEDIUM),
    # ncclras: the dead process's node is named under the DEAD heading.
    ("ras-dead", ["Errors", "======", "DEAD", "  1 job process is considered dead (unreachable via the RAS network)",
                  "  Process 3487984 on node 172.16.64.213 managing GPU 5", "",
                  "#0-0 (cf264af53edbe986) INCOMPLETE", "  Missing communicator data from 1 rank",
                  "  The missing rank: 21"],
     Category.HANG, CulpritKind.NODE, "172.16.64.213", False, True, Confidence.MEDIUM),
    # A GPU fault on that node explains why RAS lost it: the Xid decides, RAS only agrees.
    ("ras-dead-after-xid", ["Nov 29 07:41:02 gpu-b17 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, "
                            "name=python, GPU has fallen off the bus.",
                            "[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node gpu-b17 managing GPU 1"],
     Category.GPU_HARDWARE, CulpritKind.GPU, "gpu-b17 GPU 0000:9a:00", True, True, Confidence.HIGH),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "culprit", "drain", "restart", "confidence"), VERDICTS,
                         ids=[c[0] for c in VERDICTS])
def test_reason_verdicts(name: str, log: list[str], category: Category, kind: CulpritKind, culprit: str | None,
                         drain: bool, restart: bool, confidence: Confidence) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.culprit, v.drain, v.restart, v.confidence) == (
        category, kind, culprit, drain, restart, confidence), v.explanation
