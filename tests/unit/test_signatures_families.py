"""Table-driven checks: each signature family recognises the lines it is for, extracts the right
fields, and leaves look-alike lines alone."""

from __future__ import annotations

import pytest

from goodput.diagnose.signatures import Match, default_catalogue
from goodput.models import Category

CAT = default_catalogue()


def ids(line: str) -> list[str]:
    return sorted(m.signature.id for m in CAT.match_line(line, 1))


def hit(line: str, sig_id: str) -> Match:
    found = [m for m in CAT.match_line(line, 1) if m.signature.id == sig_id]
    assert found, f"{sig_id} did not match {line!r}; got {ids(line)}"
    return found[0]


K = "Nov 29 07:41:02 gpu-c12 kernel: "
XID = K + "NVRM: Xid (PCI:0000:4e:00): {code}, pid=2217, name=python3, {tail}"

XID_CASES = [
    (79, "GPU has fallen off the bus.", "xid-79", Category.GPU_HARDWARE, True),
    (48, "An uncorrectable double bit error", "xid-48", Category.GPU_HARDWARE, True),
    (95, "Uncontained: FBHUB. RST: Yes", "xid-95", Category.GPU_HARDWARE, True),
    (94, "Contained: SM (0x1). RST: No", "xid-94", Category.GPU_HARDWARE, False),
    (62, "0000d7a2 0000d5cd 00000000 00000000", "xid-62", Category.GPU_HARDWARE, True),
    (61, "0cec(2a4c) 00000000 00000000", "xid-61", Category.GPU_HARDWARE, True),
    (64, "Row Remapper Error: failed to remap", "xid-64", Category.GPU_HARDWARE, True),
    (63, "Row Remapper: New row marked for remapping, reset gpu to activate.", "xid-63",
     Category.GPU_HARDWARE, False),
    (92, "High single-bit ECC error rate", "xid-92", Category.GPU_HARDWARE, False),
    (13, "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address", "xid-13",
     Category.APP_ERROR, False),
    (31, "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f1c_9a000000",
     "xid-31", Category.APP_ERROR, False),
    (43, "Ch 00000008", "xid-43", Category.APP_ERROR, False),
    (45, "Ch 00000010", "xid-45", Category.UNKNOWN, False),
    (74, "NVLink: fatal error detected on link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "xid-74",
     Category.NVLINK, True),
    (109, "Ch 00000018, errorString CTX SWITCH TIMEOUT", "xid-109", Category.GPU_HARDWARE, True),
    (119, "Timeout after 45s of waiting for RPC response from GPU2 GSP!", "xid-119", Category.GPU_HARDWARE, True),
    (120, "GSP task 0 faulted", "xid-120", Category.GPU_HARDWARE, True),
    (136, "Link training failed", "xid-136", Category.NVLINK, True),
    # NVIDIA's bucket for 137 is IGNORE: an application's illegal NVLink peer access (issue #25).
    (137, "RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error", "xid-137", Category.NVLINK, False),
    (140, "An uncorrectable ECC error escaped remapping", "xid-140", Category.GPU_HARDWARE, True),
    (143, "GPU init failed", "xid-143", Category.GPU_HARDWARE, True),
    (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 07 (0x00000004 0x00000000)", "xid-nvlink5-fatal",
     Category.NVLINK, True),
    (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 07 (0x00000001 0x00000000)", "xid-nvlink5-nonfatal",
     Category.NVLINK, False),
    (154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "xid-154-action",
     Category.GPU_HARDWARE, True),
    (154, "GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)", "xid-154-none",
     Category.GPU_HARDWARE, False),
    (155, "NVLink SW error", "xid-155", Category.GPU_HARDWARE, True),
    (156, "Resource retirement", "xid-156", Category.GPU_HARDWARE, True),
    (158, "GPU fatal timeout", "xid-158", Category.GPU_HARDWARE, True),
    (57, "something this catalogue does not grade", "xid-other", Category.GPU_HARDWARE, False),
]


@pytest.mark.parametrize(("code", "tail", "sig_id", "category", "drain"), XID_CASES,
                         ids=[f"xid{c[0]}-{c[2]}" for c in XID_CASES])
def test_xid_codes_map_to_nvidia_buckets(code: int, tail: str, sig_id: str, category: Category,
                                         drain: bool) -> None:
    line = XID.format(code=code, tail=tail)
    assert ids(line) == [sig_id], "exactly one Xid rule (the specific one) must claim the line"
    m = hit(line, sig_id)
    assert m.signature.category is category
    assert m.signature.drain is drain
    assert m.groups["pci"] == "0000:4e:00"
    assert m.groups["xid"] == str(code)
    assert m.host == "gpu-c12"


def test_xid_without_pid_and_with_full_bdf() -> None:
    m = hit("[ 8812.221] NVRM: Xid (PCI:0000:3b:00.0): 79, GPU has fallen off the bus.", "xid-79")
    assert m.groups["pci"] == "0000:3b:00.0"
    assert m.host is None


def test_xid_31_unrecognized_client_blames_the_program_and_drains_nothing() -> None:
    line = XID.format(code=31, tail="MMU Fault: ENGINE CE3 HUBCLIENT_CE1 faulted @ 0x0. Fault is of type "
                                     "FAULT_PDE ACCESS_TYPE_VIRT_READ, UNRECOGNIZED_CLIENT")
    matched = ids(line)
    assert "xid-31-unrecognized-client" in matched
    best = max(CAT.match_line(line, 1), key=lambda m: m.signature.rank_key)
    # NVIDIA's bucket for Xid 31 is RESTART_APP: the application's fault, never a drain on its own.
    assert best.signature.category is Category.APP_ERROR and not best.signature.drain and not best.signature.restart
    # The fault line broken off its Xid line, and the shortened form, say the same.
    assert "xid-31-unrecognized-client" in ids("          MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT "
                                               "faulted @ 0x182400_0030198d.")
    assert "xid-31-unrecognized-client" in ids("Xid 31 PCI:0000:f0:00 pid=47 ... UNRECOGNIZED_CLIENT ...")
    # A hardware Xid still outranks it.
    assert CAT.get("xid-109").precedence > best.signature.precedence  # type: ignore[union-attr]


def test_xid_code_is_not_a_prefix_match() -> None:
    # Xid 790 does not exist, but 79 must not fire on it: the code is a whole number.
    assert "xid-79" not in ids(K + "NVRM: Xid (PCI:0000:4e:00): 790, whatever")
    assert "xid-13" not in ids(K + "NVRM: Xid (PCI:0000:4e:00): 136, Link training failed")


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
    ("hx-1:2201:2250 [0] NCCL WARN NET/IB : Got completion from peer 10.1.2.3<5521> with status=10 opcode=1",
     "nccl-ib-other", {"code": "10"}),
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
    # application, launcher, OOM
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
    ("watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python3:4101]", "kernel-cpu-lockup", {}),
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", "host-memory-uncorrectable", {}),
    ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", "host-memory-corrected", {}),
    ("Kernel panic - not syncing: Fatal machine check", "machine-check-fatal", {}),
    ("| Error                     | GPU 3 has uncorrectable memory errors and row  |", "gpu-row-remap-failure", {}),
    ("2026-11-29 10:28:25,496 - root - INFO - Saving latest checkpoint model trained for 3 epochs",
     "checkpoint-save-started", {}),
    ("saving checkpoint at iteration    2000 to /ckpt in torch_dist format", "checkpoint-save-started", {}),
    ("successfully saved checkpoint from iteration    2000 to /ckpt", "checkpoint-save-done", {}),
    ("    _next_data (torch/utils/data/dataloader.py:1329)", "py-spy-data-frame", {"detail": "_next_data"}),
    ("[train] rank 1 stalls at iteration 5", "rank-named-stalled", {"rank": "1"}),
    ("WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
     "launcher-sigint", {}),
    ("[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=3', '--zero', "
     "'2'] exits with return code = -9", "deepspeed-exit-sigkill", {"detail": "3"}),
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


@pytest.mark.parametrize(("line", "sig_id", "groups"), LINE_CASES, ids=[c[1] for c in LINE_CASES])
def test_family_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    m = hit(line, sig_id)
    for key, value in groups.items():
        assert m.groups.get(key, m.host if key == "host" else None) == value, key
    assert CAT.might_match(line)


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
