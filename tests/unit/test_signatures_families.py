"""Table-driven checks: each signature family recognises the lines it is for, extracts the right
fields, and leaves look-alike lines alone."""

from __future__ import annotations

import pytest

from tests.unit.signature_cases import CAT, K, check_line_case

LINE_CASES: list[tuple[str, str, dict[str, str]]] = [
    # In-job launchers and what they say about restarting
    ("I1129 04:00:01.123 123 torch/distributed/elastic/agent/server/api.py:905] [default] Worker group "
     "FAILED. 3/3 attempts left; will restart worker group", "elastic-restart-worker-group", {"code": "3"}),
    ("  restart_count=1", "elastic-restart-count", {"code": "1"}),
    ("[NVRx] Joining cluster restart after a worker failure", "nvrx-in-job-restart", {}),
    ("[default] Agent's exit code = 93", "nvrx-exit-93", {}),
    ("srun: error: gpu-7: task 0: Exited with exit code 93", "nvrx-exit-93", {}),
    ("Timeout (0:30:00)!", "faulthandler-timeout-dump", {}),
    ("Failures:", "torchrun-other-failures", {}),
    ("mlx5: SH-IDC1-10-140-24-95: got completion with error:", "mlx5-cqe-error", {"host": "SH-IDC1-10-140-24-95"}),
    ("[  +0.000049] task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002",
     "kernel-task-d-state", {"detail": "python3.11"}),
    ("[  +0.000034]  uvm_mem_map_gpu_kernel+0xcc/0x1a0 [nvidia_uvm]", "kernel-nvidia-frame", {}),
    ("[2026-11-29 01:00:00,1] [INFO] [ft_launcher12@n1] Did not get subsequent heartbeat. Waited 5.00 seconds.",
     "nvrx-heartbeat-timeout", {}),
    ("Section 'step' has been open for 31.02 seconds. Timeout is 30.00 seconds.", "nvrx-section-timeout",
     {"detail": "step"}),
    ("Some rank(s) exited with non-zero exit code: {0: 7}. Agent's exit code = 1", "nvrx-gave-up", {}),
    ("Training cycle #1 made NO progress (iteration 120 -> 120)", "nvrx-cycle-without-progress", {}),
    ("EARLY TERMINATION: 1 consecutive training cycles without progress (threshold: 1).", "nvrx-no-progress", {}),
    ("launcher.py:3740 NVRx decided the job must not be restarted (no_progress): Progress tracker detected no "
     "progress across restarts.. Agent's exit code = 93", "nvrx-no-progress", {}),
    ("[default] Another launcher reported a no-restart decision (no_progress); terminating workers.",
     "nvrx-no-progress", {}),
    ("ft_rendezvous_barrier.py:1624 [node2_7743_0] [Step 2] Detected multiple participants on the same node "
     "(127.0.0.1) in round 0. This indicates more than one ft_launcher per node (misconfiguration). Permanently "
     "closing the rendezvous.", "nvrx-rendezvous-closed", {}),
    ("slurmstepd: error: *** STEP 63532.0 ON cn106 CANCELLED AT 2020-12-14T09:43:55 ***", "slurm-step-cancelled", {}),
    ("n1:4:4 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.20.10<43369> failed : "
     "Software caused connection abort", "nccl-bootstrap-connect-failed", {"peer": "169.254.20.10"}),
    ("[W socket.cpp:663] [c10d] The client socket has failed to connect to any network address of (05, 40323).",
     "c10d-store-connect-failed", {}),
    ("h1:5971:6015 [4] NCCL INFO socketPollConnect: connect to 10.29.224.148<52333> returned Connection refused, "
     "retrying (18/34) after sleep for 1800 msec", "nccl-connect-refused", {"peer": "10.29.224.148"}),
    ("Feb 22 17:46:38 ip-10-1-74-228 slurmd[13562]: spank-epilog: error: pyxis: mkdir: cannot create directory",
     "slurm-spank-prolog-error", {"host": "ip-10-1-74-228"}),
    (K + "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 74",
     "xid-45-after-nvlink", {"code": "74"}),
    # An NVLink5 Xid (144-150) is graded only by its own line's decode: the Xid 45 after it says an
    # NVLink event ended the job (restart) and drains nothing on its own.
    (K + "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
     "xid-45-after-nvlink5", {"code": "149"}),
    (K + "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 79",
     "xid-45-after-gpu-fault", {"code": "79"}),
    ("[ft_rendezvous_barrier.py:512] Maximum number of nodes (4) exceeded", "nvrx-rendezvous-closed", {}),
    ("salloc: error: Prolog failure on node gpu-a07", "slurm-prolog-failure", {"host": "gpu-a07"}),
    ("slurmstepd: error: execve(): /var/spool/slurmd/job4411/slurm_script: No such file or directory",
     "slurmstepd-script-missing", {}),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 1",
     "slurm-hangup", {}),
    ("RuntimeError: File /ckpt/step_900/model.pt cannot be opened.", "storage-open-failed",
     {"path": "/ckpt/step_900/model.pt"}),
    ("Root Cause (first observed failure):", "torchrun-root-cause", {}),
    ("  exitcode  : 1 (pid: 3341)", "torchrun-exit-1", {}),
    ("RuntimeError: Error(s) in loading state_dict for GPT:", "app-deterministic", {}),
    ("AssertionError: Rank 3: found NaN in local grad norm in backward pass before data-parallel "
     "communication collective. Device: 3, node: set-zw04", "megatron-found-nan", {"rank": "3", "host": "set-zw04"}),
    ("[1,3]<stderr>:NET/OFI Request 0x7f completed with error. RC: 20. Error: Message truncated",
     "nccl-ofi-error", {}),
    ("node1:1:2 [0] NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable",
     "nccl-ib-setup-failed", {}),
    ("node1:1:2 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'", "nccl-cuda-oom", {}),
    ("NVRM: GPU at PCI:0000:1b:00: RmInitAdapter failed with NV_ERR_RESET_REQUIRED", "gpu-reset-required", {}),
    ('Thread 61133 (active): "MainThread"', "py-spy-dump", {}),
    # Hangs and stragglers (hang.toml): rows that stalls.py reads together
    ("[Rank 0]: Ranks 1, 5 failed to pass monitoredBarrier in 2000 ms", "monitored-barrier-failed",
     {"ranks": "1, 5"}),
    ("[rank3]: [Rank 3] Work WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
     "Timeout(ms)=600000) timed out in blocking wait.", "nccl-blocking-wait-timeout",
     {"code": "812", "op": "ALLREDUCE"}),
    ("[rank3]:[E1203 10:00:00.000000 41 ProcessGroupNCCL.cpp:1690] [PG ID 0 PG GUID 0(default_pg) Rank 3]  remote "
     "error detected from rank: 5", "torch-remote-error-rank", {"rank": "5"}),
    ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
     "via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms, keys: "
     "/default_pg//0", "torch-nccl-id-wait-failed", {"rank": "0"}),
    ("torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank 3, for "
     "key: store_based_barrier_key:1 (world_size=16, num_workers_joined=15, timeout=0:30:00, error=Wait timeout)",
     "torch-store-barrier-timeout", {}),
    ("[E1203 10:15:01.000000 9 TCPStore.cpp:366] Timed out after 901 seconds waiting for clients. 15/16 clients "
     "joined.", "torch-store-barrier-timeout", {}),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for "
     "recv operation to complete", "gloo-collective-timeout", {}),
    ("RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
     "from rank 0. Please check rank 0 logs for faulty rank.", "gloo-monitored-barrier-peer", {"rank": "0"}),
    ("RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", "cuda-no-device-visible", {}),
    ("slurmstepd: error: execve(): train.sh: No such file or directory", "slurmstepd-exec-failed", {}),
    ("slurmstepd: error: couldn't chdir to `/scratch/u1/run': No such file or directory: going to /tmp instead",
     "slurmstepd-workdir-missing", {}),
    ("slurmstepd: error: StepId=4242.0 exceeded memory limit (68719476736 > 68719476736), being killed",
     "slurm-memory-limit-exceeded", {}),
    ("srun: error: gpu-b07: task 0: Exceeded job memory limit", "slurm-memory-limit-exceeded", {}),
    ("Dec  5 10:00:01 gpu-b07 kernel: nfs: server nas01 not responding, timed out", "netfs-io-fails", {}),
    ("LustreError: 167-0: scratch-OST0004-osc-ffff9d6153c91000: This client was evicted by scratch-OST0004; in "
     "progress operations using this service will fail.", "netfs-io-fails", {}),
    ("LustreError: 166-1: MGC10.130.93.11@o2ib: Connection to MGS (at 10.130.93.10@o2ib) was lost; in progress "
     "operations using this service will fail", "netfs-io-fails", {}),
    ("Dec  5 10:00:01 gpu-b07 kernel: nfs: server nas01 not responding, still trying", "netfs-io-waits", {}),
    ("[87885.624991] Lustre: scratch-OST0004-osc-ffff9d6153c91000: Connection to scratch-OST0004 (at 10.1.0.7@o2ib) "
     "was lost; in progress operations using this service will wait for recovery to complete", "netfs-io-waits", {}),
    ("Lustre: capstor-OST003a-osc-ffff3000ef06c000: Connection restored to  (at 172.28.1.43@tcp)",
     "netfs-io-waits", {}),
    ("node1:41:59 [0] init.cc:1043 NCCL WARN Mismatched NCCL version detected : rank 0 version 22304 rank 3 "
     "version 22105", "nccl-version-mismatch", {}),
    ("NCCL WARN NCCL library is too old. This application was compiled with NCCL version 2.29.1, but is running with "
     "NCCL library version 2.28.3.", "nccl-version-mismatch", {}),
    ("node1:41:59 [0] NCCL WARN Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to "
     "enable this configuration.", "nccl-usage-check", {}),
    ("node1:41:59 [0] NCCL WARN NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and "
     "[1]mlx5_4:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA", "nccl-ib-mixed-link-layers", {}),
    ("node1:41:59 [0] NCCL WARN NET/IB : Attempted to merge incompatible devices: [0]mlx5_0:1/IB and "
     "[1]mlx5_4:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA", "nccl-ib-mixed-link-layers", {}),
    ("node1:41:59 [0] NCCL WARN NET/IB : Remote RoCE device is incompatible with the local [0]mlx5_0:1/IB. Try "
     "selecting NICs of only one link type using NCCL_IB_HCA", "nccl-ib-mixed-link-layers", {}),
    ("node1:41:59 [0] NCCL WARN MNNVL (cliqueSize 18) is available but not working on this system. Check the IMEX "
     "channel configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue.",
     "nccl-mnnvl-unavailable", {}),
    ("node1:41:59 [0] transport/net_socket.cc:636 NCCL WARN NET/Socket : peer 10.0.0.2<43521> message truncated : "
     "receiving 1048576 bytes instead of 65536. If you believe your socket network is in a healthy state, there may "
     "be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
     "nccl-socket-message-truncated", {}),
    ("node1:41:59 [0] NCCL WARN NET/Socket : message truncated : receiving 1048576 bytes instead of 65536",
     "nccl-socket-message-truncated", {}),
    ("[1,0]<stderr>:[2020-07-04 19:23:57.817885: W horovod/common/stall_inspector.cc:105] One or more tensors "
     "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of "
     "ranks for more than 60 seconds.", "horovod-stall-warning", {}),
    ('One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.',
     "horovod-stall-shutdown", {}),
    ('  File "/opt/torch/distributed/distributed_c10d.py", line 3230 in barrier', "stack-frame-faulthandler",
     {"detail": "barrier"}),
    ("    all_reduce (torch/distributed/distributed_c10d.py:2501)", "stack-frame-py-spy", {"detail": "all_reduce"}),
    ("Process 4101: python train.py --config big.yaml", "py-spy-process", {"code": "4101"}),
    ("|   3  NVIDIA H100 80GB HBM3          On  |   00000000:3B:00.0 Off |                    0 |",
     "nvidia-smi-gpu-row", {"code": "3", "pci": "00000000:3B:00.0"}),
    ("| N/A   41C    P0            312W /  700W |   71234MiB /  81559MiB |      0%      Default |",
     "nvidia-smi-util-row", {"code": "0"}),
    ("index, pci.bus_id, utilization.gpu [%]", "nvidia-smi-query-header", {}),
    ("3, 00000000:3B:00.0, 100 %", "nvidia-smi-query-row", {}),
    ("rank 7: 1.92 s/it", "rank-step-time", {"rank": "7", "detail": "1.92", "code": "s/it"}),
    ("     rank 11: 2950.12", "megatron-rank-time", {"rank": "11", "detail": "2950.12"}),
    ("64 bytes from gpu-b07 (10.1.0.7): icmp_seq=1 ttl=64 time=0.183 ms", "ping-reply",
     {"host": "gpu-b07", "peer": "10.1.0.7"}),
    ("ssh: connect to host gpu-b07 port 22: Connection timed out", "ssh-connect-failed", {"host": "gpu-b07"}),
    ("RuntimeError: CUDA error: system not yet initialized", "cuda-system-not-ready", {}),
    ("Nov 29 01:00:00 dgx-3 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.",
     "fabric-manager-failed", {"host": "dgx-3"}),
    ("        Remapping Failure Occurred        : Yes", "gpu-row-remap-failure", {}),
    ("NVRM: GPU0 _kgspRpcRecvPoll: Timeout waiting for RPC from GSP!", "gpu-gsp-timeout", {}),
    # GPU without an Xid line
    (K + "NVRM: GPU 0000:4e:00.0: GPU has fallen off the bus.", "gpu-off-bus", {"pci": "0000:4e:00.0"}),
    ("Unable to determine the device handle for GPU 0000:4E:00.0: GPU is lost.  Reboot the system to "
     "recover this GPU", "gpu-lost-nvml", {"pci": "0000:4E:00.0"}),
    (K + "pcieport 0000:4d:01.0: AER: Uncorrected (Fatal) error received: 0000:4e:00.0", "pcie-aer-fatal", {}),
    (K + "nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 24007, Fatal, Link 44 sourcetrack timeout error",
     "sxid-fatal", {"xid": "24007"}),
    (K + "nvidia-nvswitch1: SXid (PCI:0000:86:00.0): 20034, Non-fatal, Link 30 LTSSM Fault Up", "sxid-nonfatal",
     {}),
    # CUDA errors raised on a rank
    ("[rank4]: RuntimeError: CUDA error: uncorrectable ECC error encountered", "cuda-ecc", {}),
    ("  what():  CUDA error: unknown error", "cuda-unknown-error", {}),
    ("gpu-c12:881:905 [1] NCCL WARN Cuda failure 999 'unknown error'", "cuda-unknown-error", {}),
    ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution", "cuda-nvlink", {}),
    ("gpu-c12:881:881 [3] transport/nvls.cc:162 NCCL WARN Cuda failure 999 'unknown error'", "nccl-nvls", {}),
    ("RuntimeError: No CUDA GPUs are available", "cuda-no-device-visible", {}),
    ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", "cuda-devices-unavailable", {}),
    ("RuntimeError: CUDA error: invalid device ordinal", "cuda-invalid-device", {}),
    ("Failed to initialize NVML: Driver/library version mismatch", "nvml-driver-library-mismatch", {}),
    ("ws1 nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed with "
     "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", "fabric-manager-nothing-to-do", {}),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=11.8, please update your driver",
     "container-cuda-requirement", {"detail": "cuda>=11.8"}),
    # Slurm node reasons (slurmctld, scontrol show node)
    ("slurmctld: error: Setting node gpu7 state to INVAL with reason:gres/gpu count reported lower than "
     "configured (3 < 4)", "slurm-gres-count-low", {"host": "gpu7"}),
    ("c015: Reason=Node unexpectedly rebooted [slurm@2022-07-23T15:27:10]", "slurm-node-rebooted", {}),
    # Addresses the log pairs with a host (layout.toml)
    ("hx-1:2201:2201 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.2.9<0>", "nccl-bootstrap-address",
     {"address": "10.1.2.9"}),
    ("hx-1:2201:2201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.9<0>", "nccl-bootstrap-address",
     {"address": "10.1.2.9"}),
    ("hx-1:2201:2201 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.9<0>", "nccl-bootstrap-address",
     {"address": "10.1.2.9"}),
    ("Node:             k3d-k3s-default-agent-0/192.168.128.4", "kubectl-pod-node",
     {"host": "k3d-k3s-default-agent-0", "address": "192.168.128.4"}),
    ("srun: error: Plug-in initialization failed", "slurm-spank-init-failed", {}),
    ("4242            train    gpu        NODE_FAIL      0:0", "slurm-state-node-fail", {}),
    ("   JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null)", "slurm-state-out-of-memory", {}),
    # Host memory and shared memory
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
     "ray-memory-monitor", {}),
    ("Message:          The node was low on resource: memory. Threshold quantity: 1Gi, available: 991045Ki.",
     "k8s-memory-eviction", {}),
    ("      Reason:       OOMKilled", "k8s-oomkilled", {}),
    (K + "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
     "kernel-oom-report", {}),
    ("h1:20:35 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
     "shm-exhausted", {}),
    ("Detected inf/nan during batch_number=0", "numeric-overflow-detected", {}),
    ("(raylet) node_manager.cc:3097: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
     "crashed due to other reasons at node (ID: 2c8, IP: 10.0.0.5) over the last time period.", "ray-oom-summary", {}),
    ("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes.",
     "xla-resource-exhausted", {}),
    ("h1:25:25 [0] init.cc:981 NCCL WARN Invalid rank requested : 2/2", "nccl-usage-check", {}),
    ("init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around "
     "rank 39.", "nccl-usage-check", {"rank": "39"}),
    ("(autoscaler +7s) Error: No available node types can fulfill resource request {'GPU': 1.0}.",
     "ray-infeasible-request", {}),
    ("OSError: When getting information for key 'k' in bucket 'b': AWS Error SLOW_DOWN during HeadObject "
     "operation: Please reduce your request rate.", "object-store-transient",
     {"code": "SLOW_DOWN", "op": "HeadObject"}),
    # Launchers and frameworks
    ("[n1:12508] [[25215,0],1] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file grpcomm_direct.c "
     "at line 355", "orte-unpack-past-end", {}),
    (" [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
     "deepspeed-overflow-at-min-scale", {}),
    ("INFO[0289] Pod: default.job-master-0 exited with code 1  job=default.job", "kubeflow-replica-exit-1", {}),
    ("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-illegal-access", {}),
    ("RuntimeError: CUDA error: out of memory", "cuda-oom-raw", {}),
    # PyTorch / NCCL
    ("[rank7]:[E1129 07:51:04.770121 71211 ProcessGroupNCCL.cpp:632] [Rank 7] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) "
     "ran for 600047 milliseconds before timing out.", "nccl-watchdog-timeout", {"code": "4821"}),
    ("[rank0]:    - [2, 9] finished collective #77, but didn't join collective #78 (count from 1)",
     "nccl-desync-not-joined", {"ranks": "2, 9", "code": "78"}),
    ("[rank0]:    - [11] joined but didn't finish collective #78 (count from 1)",
     "nccl-desync-stuck-in-collective", {"ranks": "11"}),
    ("[rank0]: ranks [12] are the lagging ranks that caused this timeout. They never joined any collectives",
     "nccl-desync-never-joined", {"ranks": "12"}),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
     "making progress in monitoring enqueued collectives.", "nccl-heartbeat-stuck", {"code": "480"}),
    ("[Rank 2] NCCL communicator was aborted on rank 2.", "nccl-abort-cascade", {}),
    ("hx-1:2201:2250 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB: Got completion from peer 10.1.2.3<5521> "
     "with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.1.2.9", "nccl-ib-retry-exceeded",
     {"peer": "10.1.2.3", "code": "12", "host": "hx-1"}),
    ("hx-1:2201:2250 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5521> "
     "with error 4, opcode 0, len 0, vendor err 81 (Recv)", "nccl-ib-local-protection", {"code": "4"}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got async event : port error", "nccl-ib-port-error", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : mlx5_10:1 Got async event : port error", "nccl-ib-port-error", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got async event : device fatal", "nccl-ib-device-fatal", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5521> with error 8, opcode 130, "
     "len 0, vendor err 81 (Recv)", "nccl-ib-local-protection", {"code": "8"}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got async event : GID table change", "nccl-ib-gid-change", {}),
    ("hx-1:2201:2250 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
     "len 0, vendor err 129", "nccl-ib-retry-exceeded", {"code": "12", "host": "hx-1"}),
    ("[rank1]:[F919 07:00:13.418192812 ProcessGroupNCCL.cpp:1653] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
     "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
     "nccl-heartbeat-stuck", {}),
    ("[rank1]:[W901 ProcessGroupNCCL.cpp:1826] [PG ID 0 PG GUID 0 Rank 1] Failed to check the \"should dump\" flag "
     "on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer",
     "nccl-store-poll-after-teardown", {}),
    ("hx-1:2201:2250 [0] nccl_net_ofi_create_plugin:1067 NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
     "ofi-no-provider", {"host": "hx-1"}),
    ("hx-1:2201:2250 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data "
     "available", "ofi-no-provider", {}),
    ("fi_getinfo: -61 (No data available)", "ofi-no-provider", {}),
    ("hx-1:2201:2250 [0] get_ofi_provider:312 NCCL WARN NET/OFI Could not find any optimal provider",
     "ofi-no-provider", {"host": "hx-1"}),
    ("[W socket.cpp:634] The server socket on [localhost]:29501 is not yet listening (errno: 111 - Connection "
     "refused).", "c10d-store-retry-warning", {}),
    ("[W506 00:43:56.240 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=3, addr=[hx-1]:47466, "
     "remote=[hx-1]:29500): Connection reset by peer", "c10d-store-retry-warning", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 113. Error: 15 (Unreachable "
     "remote (never received a response))", "efa-unreachable-remote", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 103. Error: 4126 (Unresponsive "
     "receiver (reachable by EFA device but handshake failed))", "efa-receiver-unresponsive", {}),
    ("[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)", "pcie-aer-gpu-unrecovered",
     {"pci": "0000:03:00.0"}),
    ("pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0", "pcie-aer-fatal", {}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/OFI Request 0x7f12 completed with error. RC: 5. Error: Invalid receiver "
     "queue pair number (QPN) My EFA addr: fi_addr_efa://[fe80::1]:0:65", "efa-invalid-dest-qpn", {}),
    ("libfabric:4411:1700000000::efa:cq:efa_rdm_pke_handle_rx_error():88<warn> err: 22, message: Invalid packet "
     "type received when zero copy recv mode is ON (4125)", "efa-zcpy-packet-mismatch", {}),
    ("hx-1:2201:2250 [0] register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = 2) for "
     "device 0. RC: -22, Error: Invalid argument", "ofi-register-memory-failed", {}),
    ("[1700000000.123456] [hx-1:4411:0]          ib_md.c:1678 UCX  ERROR ibv_open_device(mlx5_0) failed: Cannot "
     "allocate memory", "rdma-verbs-no-memory", {"host": "hx-1"}),
    ("hx-1:2201:2201 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : /lib/x86_64-linux-gnu/libc.so.6: version "
     "`GLIBC_2.32' not found (required by /usr/local/lib/libnccl-net.so) : when loading libnccl-net.so",
     "nccl-net-plugin-load-failed", {}),
    ("hx-1:2201:2201 [0] net.cc:579 NCCL WARN Error: network gIB not found.", "nccl-net-not-found",
     {"detail": "gIB"}),
    ("hx-1:2201:2201 [0] NCCL WARN Bootstrap : no socket interface found", "nccl-socket-no-interface", {}),
    ("hx-1:2201:2201 [0] NCCL WARN NET/Socket : no interface found", "nccl-socket-no-interface", {}),
    ("hx-1:2201:2250 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
     "hx-7<49122>", "nccl-socket-closed", {"peer": "hx-7"}),
    ("torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, invalid usage",
     "nccl-invalid-usage", {}),
    ("[hx-3:4411 :0:4498] Caught signal 7 (Bus error: nonexistent physical address)", "nccl-shm-bus-error", {}),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 7/8 clients joined.",
     "rendezvous-timeout", {}),
    ("The node 'hx-4_1234_0' has failed to send a keep-alive heartbeat to the rendezvous 'job9' due to an "
     "error of type RendezvousConnectionError.", "rendezvous-keepalive", {"host": "hx-4"}),
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5521> with status=24 opcode=1",
     "nccl-ib-other", {"code": "24"}),
    ("torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, internal error - please "
     "report this issue to the NCCL developers, NCCL version 2.21.5", "nccl-internal-error", {}),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "nccl-unhandled-cuda", {}),
    ("hx-2:52110:52110 [5] NCCL INFO comm 0x55e3a9f0 rank 13 nranks 16 cudaDev 5 busId bb000 commId 0x9d2f - "
     "Init COMPLETE", "nccl-init-rank", {"rank": "13", "code": "16", "pci": "bb000", "host": "hx-2"}),
    ("[rank3]: torch.distributed.DistNetworkError: Connection reset by peer", "dist-connection-lost", {}),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
     "[10.0.0.3]:27823", "dist-connection-lost", {}),
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE)", "nccl-collective-mismatch", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), LINE_CASES, ids=[c[1] for c in LINE_CASES])
def test_family_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


NEAR_MISSES = [
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
    " iteration      100/   1000 | lm loss: 2.3 | number of nan iterations:   0 |",
    "Saved 3 files to /tmp",
    "straggler report: rank 3 is not a straggler (relative perf 0.98)",
    "INFO: error_file not set, using default",
    "the model uses 3% of free memory; no space issues expected",
    "slurmstepd: error: *** JOB 77 ON hx-1 COMPLETED ***",
    "Received keep-alive from node hx-4",
    "rank 3 reached a timeout-free barrier",
    # NVRx 0.7 logs these on every in-job restart and every successful exit.
    "ft_rendezvous_barrier.py:1372 [node2_9328_0] [Step 0] Round 0 closed (training in progress), waiting for "
    "next round...",
    "ft_rendezvous_barrier.py:2991 The node 'node1_9325_0' has permanently closed the rendezvous '3'.",
    # Healthy NCCL start-up without a network plugin, on a socket-only host, and with the OFI plugin up.
    "hx-1:2201:2201 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object "
    "file: No such file or directory : when loading libnccl-net.so",
    "hx-1:2201:2201 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "hx-1:2201:2201 [0] NCCL INFO NET/IB : No device found.",
    "hx-1:2201:2201 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_do_not_match(line: str) -> None:
    assert CAT.match_line(line, 1) == []
