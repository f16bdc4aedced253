"""Issue #25, round 3, application classes: what the figures of a CUDA OOM say, a store only its
server joined, and a Lightning rendezvous that never completed.

Each row is the smallest log, in the format the software documents (or prints from its source),
that exercises one class, with the decision the class calls for; look-alike rows guard the cases
the rules must leave as they were.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.diagnose.signatures.cuda_oom import OomFigures, read_figures
from goodput.models import Category, CulpritKind

CAT = default_catalogue()
GIB = 1 << 30
MIB = 1 << 20

# PyTorch 1.x's caching-allocator message (c10/cuda/CUDACachingAllocator.cpp).
OLD = ("RuntimeError: CUDA out of memory. Tried to allocate {tried} (GPU 0; {total} total capacity; {alloc} already "
       "allocated; {free} free; {reserved} reserved in total by PyTorch)")
# PyTorch 2.x's: other processes on the device are listed by NVML before this process's own use.
NEW = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of {total} "
       "of which {free} is free. {others}Including non-PyTorch memory, this process has {mine} memory in use. Of the "
       "allocated memory {mine} is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.")

# (name, log, category, culprit kind, drain, restart)
CASES: list[tuple[str, list[str], Category, CulpritKind, bool, bool]] = [
    # The model does not fit: the process itself holds the device. Restarting fails the same way.
    ("oom-model-too-big-old", [OLD.format(tried="2.00 GiB", total="79.15 GiB", alloc="76.10 GiB", free="1.05 GiB",
                                          reserved="77.30 GiB")],
     Category.OOM, CulpritKind.APP, False, False),
    ("oom-model-too-big-new", [NEW.format(tried="2.00 GiB", total="79.15 GiB", free="1.05 GiB", others="",
                                          mine="77.80 GiB")],
     Category.OOM, CulpritKind.APP, False, False),
    # The device had more free memory than was asked for, yet the allocation failed: the free memory is
    # in pieces (fragmentation), a state of this process and device that a fresh process does not have.
    ("oom-free-exceeds-request-old", [OLD.format(tried="304.00 MiB", total="8.00 GiB", alloc="142.76 MiB",
                                                 free="6.32 GiB", reserved="158.00 MiB")],
     Category.OOM, CulpritKind.APP, False, True),
    # The process hit its own cap (set_per_process_memory_fraction): the device's free memory was never its.
    ("oom-at-the-process-cap", [
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; 38.00 GiB "
        "already allocated; 40.00 GiB free; 39.58 GiB allowed; 39.00 GiB reserved in total by PyTorch)"],
     Category.OOM, CulpritKind.APP, False, False),
    # The same message wrapped by a terminal or a collector: the figures are on the next line.
    ("oom-free-exceeds-request-wrapped", [
        "RuntimeError: CUDA out of memory. Tried to allocate 304.00 MiB (GPU 0; 8.00 GiB total capacity;",
        "142.76 MiB already allocated; 6.32 GiB free; 158.00 MiB reserved in total by PyTorch)"],
     Category.OOM, CulpritKind.APP, False, True),
    ("oom-free-exceeds-request-new", [NEW.format(tried="512.00 MiB", total="79.15 GiB", free="4.00 GiB", others="",
                                                 mine="75.00 GiB")],
     Category.OOM, CulpritKind.APP, False, True),
    # Most of the device is held by memory that is not this process's: another process holds the GPU
    # (a leftover of an earlier job, or a process the scheduler does not know about). Rerun; the node
    # is the place to look, but nothing in the log says the other process is not the job's own.
    ("oom-device-held-by-another-process-old", [
        OLD.format(tried="216.00 MiB", total="7.92 GiB", alloc="69.17 MiB", free="24.56 MiB", reserved="86.00 MiB")],
     Category.OOM, CulpritKind.NODE, False, True),
    ("oom-device-held-by-another-process-new", [
        NEW.format(tried="50.00 MiB", total="79.15 GiB", free="22.12 MiB", others="Process 932170 has 70.88 GiB memory "
                   "in use. ", mine="8.20 GiB")],
     Category.OOM, CulpritKind.NODE, False, True),
    # PyTorch 2.1 printed "capacty"; the figures mean the same.
    ("oom-capacty-spelling", [NEW.format(tried="512.00 MiB", total="23.69 GiB", free="4.00 GiB", others="",
                                         mine="19.00 GiB").replace("capacity", "capacty")],
     Category.OOM, CulpritKind.APP, False, True),
    # TCPStore: world_size counts the server's own client, so 1/N is the server alone: no other task was
    # ever started (python run directly instead of through srun, wrong --ntasks): a launch error.
    ("store-only-the-server-joined", [
        "torch.distributed.DistStoreError: Timed out after 3601 seconds waiting for clients. 1/16 clients joined."],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # Some joined and one did not: a node never started or cannot reach the store (as before).
    ("store-one-client-missing", [
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 15/16 clients joined."],
     Category.NODE_FAILURE, CulpritKind.UNKNOWN, False, True),
    # Lightning: global rank 0 printed its rendezvous line and never the banner that follows a completed
    # rendezvous; Lightning's SLURM guide: launched without srun, or nodes/tasks not matching the Trainer.
    ("lightning-rendezvous-never-completed", ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("lightning-1-0-rendezvous-never-completed", ["initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("lightning-rendezvous-completed-is-benign", [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4",
        "----------------------------------------------------------------------------------------------------",
        "distributed_backend=nccl",
        "All distributed processes registered. Starting with 4 processes",
        "Epoch 0:  12%|#2        | 120/1000 [00:31<03:49,  3.83it/s, loss=2.31]"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("lightning-1-0-rendezvous-completed-is-benign", [
        "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
        "All DDP processes registered. Starting ddp with 8 processes"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("lightning-single-process-is-benign", ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # Ray: a worker the Linux OOM killer killed cannot report why; Ray's memory guide documents this
    # worker-exit message as how such a kill shows. Host memory, not the network the EOF suggests.
    ("ray-worker-killed-by-oom-killer", [
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. "
        "(1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. "
        "(3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."],
     Category.OOM, CulpritKind.APP, False, False),
    # A child killed by SIGKILL with no traceback, as the OOM killer does, told by other launchers:
    # Python's CalledProcessError (accelerate, torch.distributed.launch), Open MPI's mpirun, bash.
    ("subprocess-died-with-sigkill", [
        "subprocess.CalledProcessError: Command '['/usr/bin/python3', 'train.py', '--bs', '64']' died with "
        "<Signals.SIGKILL: 9>."],
     Category.OOM, CulpritKind.APP, False, False),
    ("mpirun-rank-exited-on-signal-9", [
        "mpirun noticed that process rank 3 with PID 41822 on node gpu-node-07 exited on signal 9 (Killed)."],
     Category.OOM, CulpritKind.APP, False, False),
    ("bash-job-killed", [
        "/var/spool/slurmd/job4711/slurm_script: line 23: 51234 Killed                  python train.py --bs 64"],
     Category.OOM, CulpritKind.APP, False, False),
    # Other signals keep their own meaning.
    ("subprocess-died-with-sigsegv-is-not-oom", [
        "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGSEGV: 11>."],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("mpirun-signal-15-is-not-oom", [
        "mpirun noticed that process rank 3 with PID 41822 on node gpu-node-07 exited on signal 15 (Terminated)."],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # The dynamic loader (ld.so) refusing the program: version skew between built binaries, or a
    # library missing from the environment. The software environment, deterministic.
    ("ld-so-undefined-symbol", [
        "python: symbol lookup error: /opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined "
        "symbol: ncclCommRegister"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("ld-so-missing-library", [
        "python3: error while loading shared libraries: libcudart.so.12: cannot open shared object file: No such file "
        "or directory"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # The driver's own libraries come with the node's driver (or the container runtime's GPU hook): the
    # loader's message alone does not say which, so it decides nothing.
    ("ld-so-missing-driver-library-decides-nothing", [
        "python3: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file "
        "or directory"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    # A real failure after a completed rendezvous still decides.
    ("lightning-then-cuda-oom", [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
        "All distributed processes registered. Starting with 2 processes",
        OLD.format(tried="2.00 GiB", total="79.15 GiB", alloc="76.10 GiB", free="1.05 GiB", reserved="77.30 GiB")],
     Category.OOM, CulpritKind.APP, False, False),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "drain", "restart"), CASES, ids=[c[0] for c in CASES])
def test_class(name: str, log: list[str], category: Category, kind: CulpritKind, drain: bool, restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (category, kind, drain, restart), v.explanation


def test_oom_figures_are_read_in_bytes() -> None:
    old = read_figures(OLD.format(tried="304.00 MiB", total="8.00 GiB", alloc="142.76 MiB", free="6.32 GiB",
                                  reserved="158.00 MiB"))
    assert old == OomFigures(tried=304 * MIB, total=8 * GIB, free=int(6.32 * GIB), mine=158 * MIB)
    new = read_figures(NEW.format(tried="50.00 MiB", total="79.15 GiB", free="22.12 MiB",
                                  others="Process 1 has 70.88 GiB memory in use. ", mine="8.20 GiB"))
    assert new is not None and new.mine == int(8.2 * GIB)


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA out of memory.",  # no figures
    OLD.format(tried="1" * 40 + " GiB", total="8.00 GiB", alloc="1 GiB", free="1 GiB", reserved="1 GiB"),  # absurd
    OLD.format(tried="1.00 GiB", total="0 bytes", alloc="0 bytes", free="0 bytes", reserved="0 bytes"),  # no device
])
def test_oom_figures_refuse_what_is_not_a_device(text: str) -> None:
    assert read_figures(text) is None


def test_new_rules_cite_their_documented_source_and_never_drain() -> None:
    for sig_id in ("torch-store-server-alone", "lightning-rendezvous-incomplete", "lightning-rendezvous-complete",
                   "ray-worker-exit-oom-killer", "torch-cuda-oom-figures", "child-killed-sigkill",
                   "dynamic-loader-error", "dynamic-loader-driver-library"):
        sig = CAT.get(sig_id)
        assert sig is not None, sig_id
        assert sig.source, sig_id
        assert not sig.drain, sig_id
    from goodput.diagnose.signatures.cuda_oom import FOREIGN, FRAGMENTED
    for sig in (FOREIGN, FRAGMENTED):
        assert sig.source and not sig.drain
