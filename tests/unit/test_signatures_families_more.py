"""Table-driven checks, continued (tests/unit/test_signatures_families.py): application,
launcher, OOM, storage, Slurm and node-platform lines, with the fields each extracts."""

from __future__ import annotations

import pytest

from tests.unit.signature_cases import K, check_line_case, ids

LINE_CASES_MORE: list[tuple[str, str, dict[str, str]]] = [
    ("node1:22671:22795 [1] transport/p2p.cu:431 WARN failed to open CUDA IPC handle : 30 unknown error",
     "nccl-cuda-ipc-open-failed", {}),
    # application, launcher, OOM
    ("  Warning  UnexpectedAdmissionError  13s   kubelet  Allocate failed due to rpc error: code = Unknown desc = "
     "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1, which is "
     "unexpected", "k8s-shared-gpu-request-too-large", {}),
    ("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "torch-cuda-oom", {}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.35 GiB total "
     "capacity)", "torch-cuda-oom", {}),
    (K + "Out of memory: Killed process 4410 (python) total-vm:1kB", "host-oom-killer", {"code": "4410"}),
    ("slurmstepd: error: Detected 3 oom-kill event(s) in StepId=5521.batch. Some of your processes may have "
     "been killed by the cgroup out-of-memory handler.", "slurm-oom-kill", {"code": "3"}),
    ("srun: error: hx-2: task 5: Out Of Memory", "srun-task-oom", {"host": "hx-2", "task": "5"}),
    ("E1129 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 3 "
     "(pid: 5) of binary: /usr/bin/python", "torchrun-exit-sigkill", {}),
    ("  exitcode  : -11 (pid: 4242)", "native-segfault", {}),
    ("  exitcode  : -7 (pid: 4242)", "bus-error-exit", {}),
    ("  exitcode  : -6 (pid: 4242)", "elastic-sigabrt", {}),
    (" [2026] iteration 9/ 10 | lm loss: NAN | loss scale: 1.0 |", "loss-nan", {}),
    ("[rank3]: ValueError: too many values to unpack (expected 2)", "python-exception", {"detail": "ValueError"}),
    ("[rank3]: MemoryError", "python-memory-error", {}),
    # Kubernetes
    ("  Warning  FailedScheduling  12s  default-scheduler  0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
     "k8s-failed-scheduling", {}),
    ('  Warning  Failed  kubelet  Failed to pull image "nvcr.io/nvidia/pytorch:24.01-py3": not found',
     "k8s-image-pull-failed", {}),
    ("Message:  The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 2Gi.",
     "k8s-disk-eviction", {}),
    ('Message:  Container trainer exceeded its local ephemeral storage limit "10Gi". ', "k8s-pod-storage-limit", {}),
    ("  Warning  NodeNotReady  3m  node-controller  Node is not ready", "k8s-node-not-ready", {}),
    ("      Reason:       DeadlineExceeded", "k8s-job-deadline-exceeded", {}),
    ("  Warning  BackoffLimitExceeded  job-controller  Job has reached the specified backoff limit",
     "k8s-job-backoff-limit", {}),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "elastic-child-failed", {}),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 88 got signal: 15",
     "elastic-signal-exception", {"code": "15"}),
    # storage
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_9/model.pt'", "storage-enospc",
     {"path": "/ckpt/step_9/model.pt"}),
    ("OSError: [Errno 122] Disk quota exceeded: '/home/u/ckpt'", "storage-edquot", {"path": "/home/u/ckpt"}),
    ("OSError: [Errno 116] Stale file handle", "storage-estale", {}),
    ("OSError: [Errno 5] Input/output error: '/scratch/shard_00017.bin'", "storage-eio",
     {"path": "/scratch/shard_00017.bin"}),
    ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
     "storage-torch-reader", {}),
    ("ERROR: Failed to save checkpoint to /ckpt/global_step400", "storage-checkpoint-failed",
     {"path": "/ckpt/global_step400"}),
    (K + "INFO: task python3:99231 blocked for more than 122 seconds.", "kernel-hung-task", {}),
    ("RuntimeError: DataLoader worker (pid 811) is killed by signal: Killed.", "dataloader-killed", {}),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
     "(shm).", "dataloader-shm-bus-error", {}),
    ("W1129 api.py:897] Sending process 41878 closing signal SIGTERM", "elastic-closing-siblings", {}),
    ("E1129 api.py:869] failed (exitcode: -15) local_rank: 2 (pid: 7733) of binary: /usr/bin/python",
     "elastic-worker-failed", {"exitcode": "-15"}),
    ("E1129 api.py:869] failed (exitcode: 1) local_rank: 2 (pid: 7733) of binary: /usr/bin/python",
     "elastic-worker-exit-status", {"exitcode": "1"}),
    ("  exitcode  : 2 (pid: 140389)", "torchrun-summary-exitcode", {"exitcode": "2"}),
    ("[rank5]: Traceback (most recent call last):", "python-traceback", {}),
    (K + "NVRM: fallen off the bus and is not responding to commands.", "gpu-off-bus-banner", {}),
    (K + "pcieport 0000:4d:01.0: AER: Corrected error received: 0000:4e:00.0", "pcie-aer-corrected", {}),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  rank 6 "
     "and we will try our best to dump the debug info.", "nccl-dump-signal", {"rank": "6"}),
    ("[PG 0 Rank 1] Timeout at NCCL work: 2211, last enqueued NCCL work: 2211, last completed NCCL work: 2210.",
     "nccl-watchdog-status", {"code": "2211"}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5521> with error 5, opcode 0",
     "nccl-ib-flush", {"code": "5"}),
    ("NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
     "nccl-remote-or-system-error", {}),
    ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
     "nccl-system-error", {}),
    ("hx-1:2201:2250 [0] NCCL INFO [Service thread] Connection closed by localRank 3", "nccl-local-rank-closed", {}),
    ("hx-1:2201:2201 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>", "nccl-socket-local-interface",
     {"detail": "docker0"}),
    ("hx-1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]bond0:10.1.0.7<0> [1]br-5d1e0c9a77f2:172.19.0.1<0>",
     "nccl-socket-local-interface", {"detail": "br-5d1e0c9a77f2"}),
    ("hx-1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]ens5:10.1.0.7<0> [1]veth1a2b3c4:fe80::b878:6cff:fe52:abe2%"
     "veth1a2b3c4<0>", "nccl-socket-local-interface", {"detail": "veth1a2b3c4"}),
    ("[rank8] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. "
     "Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.", "gloo-loopback-fallback",
     {"detail": "loopback"}),
    ("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown.",
     "nvml-driver-library-mismatch", {}),
    ("RuntimeError: [enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file "
     "data/12: file write failed", "storage-torch-writer", {"path": "data/12"}),
    # Slurm
    ("slurmstepd: error: *** JOB 77 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 DUE TO TIME LIMIT ***",
     "slurm-time-limit", {"host": "hx-1"}),
    ("slurmstepd: error: *** STEP 77.0 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "slurm-node-failure-banner", {}),
    ("slurmstepd: error: *** STEP 77.0 ON hx-1 FAILED (non-zero exit code or other failure mode) ***",
     "slurm-failed-banner", {}),
    ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", "srun-step-aborted", {}),
    ("srun: Job 81234 step creation still disabled, retrying (Requested nodes are busy)",
     "srun-step-creation-retrying", {}),
    ("[2026-12-05T10:00:00.000] error: Setting node gpu-a07 state to INVAL with reason:Low RealMemory "
     "(reported:512000 < 100.00% of configured:1031000)", "slurm-node-resources-low", {"host": "gpu-a07"}),
    ("   Reason=Low socket*core*thread count, Low CPUs [slurm@2026-12-05T10:00:00]", "slurm-node-resources-low", {}),
    ("[2026-12-05T10:00:00.000] node gpu-a04 not resumed by ResumeTimeout(600), setting DOWN and POWERED_DOWN",
     "slurm-node-resume-failed", {"host": "gpu-a04"}),
    ("   Reason=reboot timed out [slurm@2026-12-05T10:00:00]", "slurm-node-resume-failed", {}),
    ("error: validate_node_specs: Prolog or job env setup failure on node gpu-a03, draining the node",
     "slurm-prolog-failure", {"host": "gpu-a03"}),
    ("[2026-12-05T10:00:00.000] error: Prolog/Epilog failure on nodes gpu-[01-02], set to state DRAIN",
     "slurm-prolog-failure", {}),
    ("   JobState=FAILED Reason=NodeDown Dependency=(null)", "slurm-reason-node-down", {}),
    ("  81234       gpu    train    alice PD       0:00      4 (NodeDown)", "slurm-reason-node-down", {}),
    ("   JobState=PENDING Reason=BadConstraints Dependency=(null)", "slurm-reason-request-refused", {}),
    ("   JobState=TIMEOUT Reason=InactiveLimit Dependency=(null)", "slurm-reason-inactive-limit", {}),
    ("   JobState=FAILED Reason=SystemFailure Dependency=(null)", "slurm-reason-system-or-partition", {}),
    ("srun: error: Node failure on hx-9", "slurm-node-failure", {"host": "hx-9"}),
    ("slurmstepd: error: *** JOB 77 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 DUE TO PREEMPTION ***",
     "slurm-preempted", {}),
    ("[2026-11-29T01:02:03.000] error: *** STEP 77.0 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 DUE TO JOB "
     "REQUEUE ***", "slurm-requeued", {}),
    ("slurmstepd: error: *** JOB 77 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 ***", "slurm-cancelled", {}),
    ("slurmstepd: error: *** JOB 77 ON hx-1 CANCELLED AT 2026-11-29T01:02:03 DUE to SIGNAL Terminated ***",
     "slurm-cancelled", {}),
    ("slurmstepd: error: *** STEP 77.0 ON hx-3 UNCORRECTABLE MEMORY ERROR AT 2026-11-29T01:02:03 ***",
     "slurm-uncorrectable-memory", {"host": "hx-3"}),
    ("srun: error: Task launch for StepId=77.0 failed on node hx-5: Job credential expired", "slurm-launch-failed",
     {"host": "hx-5"}),
    ("slurmstepd: error: *** JOB 77 STEPD TERMINATED ON hx-6 AT 2026-11-29T01:02:03 DUE TO JOB NOT ENDING WITH "
     "SIGNALS ***", "slurm-unkillable-step", {"host": "hx-6"}),
    ("  host      : hx-6.cluster", "torchrun-summary-host", {"host": "hx-6.cluster"}),
    ("  rank      : 12 (local_rank: 4)", "torchrun-summary-rank", {"rank": "12"}),
    (K + "NVRM: The NVIDIA GPU 0000:4e:00.0", "gpu-pci-banner", {"pci": "0000:4e:00.0"}),
    ("srun: error: hx-1: tasks 0-7: Exited with exit code 1", "srun-task-exit", {"host": "hx-1", "task": "0"}),
    ("srun: error: nid8: tasks 0-57,59-63: Terminated", "srun-task-exit",
     {"task": "0", "detail": "-57,59-63", "action": "Terminated"}),
    ("[2026-11-29T00:00:00.809] error: *** STEP 5.0 ON nid8 CANCELLED AT 2026-11-29T00:00:00 DUE TO TASK FAILURE ***",
     "slurm-task-failure", {}),
    # what the job was doing when it failed
    ("zeyer@cn-234 ~ % nvidia-smi", "shell-prompt", {"host": "cn-234"}),
    ("[admin@gpu-a07 ~]$ dmesg -T | grep NVRM", "shell-prompt", {"host": "gpu-a07"}),
    ("root@dgx-3:/workspace# nvidia-smi -q -d ROW_REMAPPER", "shell-prompt", {"host": "dgx-3"}),
    ("hoth:~$ lspci | grep -i nvidia", "shell-prompt-bare", {"host": "hoth"}),
    ("gpu-a07:/var/log# dmesg -T", "shell-prompt-bare", {"host": "gpu-a07"}),
    ("| Diagnostic                | Result                                         |", "dcgm-diag-report", {}),
    # GPU, NVLink and node platform (issue #25)
    ("error creating nvml.Device 5: nvml: GPU is lost, which is unexpected", "nvml-gpu-lost", {}),
    ("error creating nvml.Device 0: nvml: Unknown Error, which is unexpected", "nvml-device-handle-failed", {}),
    ("1c:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] (rev ff)",
     "gpu-pci-config-all-ones", {"pci": "1c:00.0"}),
    ("        Pending                           : Yes", "gpu-row-remap-pending", {}),
    ("|   1  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    2 |",
     "smi-volatile-uncorrectable-ecc", {"pci": "00000000:18:00.0", "code": "2"}),
    ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x25:0x65:1457)", "gpu-init-failed", {"pci": "0000:3b:00.0"}),
    ("nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with "
     "driver version 530.41.03.", "fabric-manager-driver-mismatch", {"detail": "530.30.02"}),
    # A shipper or a paste that cut the line after its fixed text.
    ("nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with "
     "driver version", "fabric-manager-driver-mismatch", {"detail": "530.30.02"}),
    ("CUDA_ERROR_CONTAINED: Invalid access of peer GPU memory over nvlink or a hardware error", "cuda-contained", {}),
    # Node platform (issue #25, round 3)
    ("gpu-b07:~$ lspci | grep -i nvidia", "shell-prompt-bare", {"host": "gpu-b07"}),
    ("ERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol 'rcu_read_unlock_strict'",
     "nvidia-module-build-failed", {"detail": "nvidia.ko"}),
    ("Job for nvidia-persistenced.service failed because the control process exited with error code.",
     "nvidia-persistenced-failed", {}),
    ("python3[4101]: segfault at 18 ip 00007f2a61c3b5e4 sp 00007ffd5d2e9a80 error 4 in "
     "libcuda.so.535.104.05[7f2a61800000+1e00000]", "kernel-segfault-libcuda", {}),
    ("\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
     "pcie-acs-enabled", {}),
    ("Attached GPUs                             : 1", "smi-q-attached-gpus", {"code": "1"}),
    ("GPU 00000000:00:1E.0", "smi-q-gpu-header", {"pci": "00000000:00:1E.0"}),
    ("        Volatile", "smi-q-ecc-scope", {"detail": "Volatile"}),
    ("            Double Bit", "smi-q-ecc-bits", {"detail": "Double"}),
    ("            DRAM Uncorrectable            : 2", "smi-q-ecc-count", {"detail": "DRAM Uncorrectable", "code": "2"}),
    ("            SRAM Uncorrectable SEC-DED    : 1", "smi-q-ecc-count",
     {"detail": "SRAM Uncorrectable SEC-DED", "code": "1"}),
    ("watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python3:4101]", "kernel-cpu-lockup", {}),
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", "host-memory-uncorrectable", {}),
    ("Uncorrectable ECC / other uncorrectable memory error @P2-DIMMF1 - Assertion", "host-memory-uncorrectable-ipmi",
     {}),
    ("   7 | 12/03/2026 | 10:41:02 | Memory #0x87 | Correctable ECC | Asserted", "host-memory-corrected-ipmi", {}),
    ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", "host-memory-corrected", {}),
    ("Kernel panic - not syncing: Fatal machine check", "machine-check-fatal", {}),
    ("| Error                     | GPU 3 has uncorrectable memory errors and row  |", "gpu-row-remap-isolate", {}),
    ("GPU 0 had memory errors and row remappings are pending", "gpu-row-remap-isolate", {}),
    ("GPU 5 had uncorrectable memory errors and 2 rows were remapped", "gpu-row-remap-isolate", {}),
    ("|                           |  remapping failed.                             |", "gpu-row-remap-failure", {}),
    ("GPU 1 had uncorrectable memory errors and row remapping failed.", "gpu-row-remap-failure", {}),
    ("2026-11-29 10:28:25,496 - root - INFO - Saving latest checkpoint model trained for 3 epochs",
     "checkpoint-save-started", {}),
    ("saving checkpoint at iteration    2000 to /ckpt in torch_dist format", "checkpoint-save-started", {}),
    ("successfully saved checkpoint from iteration    2000 to /ckpt", "checkpoint-save-done", {}),
    ("    _next_data (torch/utils/data/dataloader.py:1329)", "py-spy-data-frame", {"detail": "_next_data"}),
    ("[train] rank 1 stalls at iteration 5", "rank-named-stalled", {"rank": "1"}),
    ("WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
     "launcher-sigint", {}),
    ("[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=3', '--zero', "
     "'2'] exits with return code = -9", "deepspeed-exit-sigkill", {}),
    ("RuntimeError: write(): fd 29 failed with Input/output error", "storage-write-eio", {}),
    # Round 3, application (diag-app).
    ("142.76 MiB already allocated; 6.32 GiB free; 158.00 MiB reserved in total by PyTorch)",
     "torch-cuda-oom-figures", {}),
    ("torch.distributed.DistStoreError: Timed out after 3601 seconds waiting for clients. 1/16 clients joined.",
     "torch-store-server-alone", {}),
    ("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4", "lightning-rendezvous-incomplete", {}),
    ("All distributed processes registered. Starting with 4 processes", "lightning-rendezvous-complete", {}),
    ("Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. "
     "End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to "
     "high memory usage.", "ray-worker-exit-oom-killer", {}),
    ("mpirun noticed that process rank 3 with PID 41822 on node gpu-node-07 exited on signal 9 (Killed).",
     "child-killed-sigkill", {"rank": "3", "host": "gpu-node-07"}),
    ("python: symbol lookup error: /x/libtorch_cuda.so: undefined symbol: ncclCommRegister",
     "dynamic-loader-error", {}),
    ("python3: error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object file",
     "dynamic-loader-driver-library", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), LINE_CASES_MORE, ids=[c[1] for c in LINE_CASES_MORE])
def test_family_lines_more(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


@pytest.mark.parametrize("line", [
    # The host's own bridge and fabric interfaces: routable, so nothing local about them.
    "hx-1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]br0:10.1.0.7<0> [1]bond0:10.2.0.7<0>",
    "hx-1:2201:2201 [0] NCCL INFO Bootstrap : Using ens5:10.1.0.7<0>",
    "hx-1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]ib0:10.3.0.7<0> [1]brx-uplink:10.4.0.7<0>",
])
def test_a_routable_socket_interface_is_not_local(line: str) -> None:
    assert "nccl-socket-local-interface" not in ids(line)
