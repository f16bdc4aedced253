"""Node, host, Slurm and application classes of issue #25, each on synthetic lines in the format the
vendor documents (CUDA runtime error strings, NVML return codes, Fabric Manager, slurmctld node
reasons, Ray's memory monitor, the kubelet's eviction message, NCCL's shared-memory set-up).

Each case says what one log can settle: a CUDA error that only says "no device" is a launch
configuration as often as a dead GPU, so it does not drain; NVML refusing to start because the
kernel module and the library differ is the node's driver state, so it does."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.models import Category, CulpritKind

CAT = default_catalogue()


def ids(line: str) -> list[str]:
    return sorted(m.signature.id for m in CAT.match_line(line, 1))


# (line, signature id)
LINES = [
    ("Failed to initialize NVML: Driver/library version mismatch", "nvml-driver-library-mismatch"),
    ("pynvml.nvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
     "nvml-driver-library-mismatch"),
    ("RuntimeError: CUDA error: no CUDA-capable device is detected", "cuda-no-device-visible"),
    ("RuntimeError: No CUDA GPUs are available", "cuda-no-device-visible"),
    ("THCudaCheck FAIL file=/x/THCGeneral.cpp line=25 error=46 : all CUDA-capable devices are busy or unavailable",
     "cuda-devices-unavailable"),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "cuda-devices-unavailable"),
    ("INTERNAL: Failed call to cuDeviceGet: CUDA_ERROR_INVALID_DEVICE: invalid device ordinal",
     "cuda-invalid-device"),
    ("RuntimeError: CUDA error: invalid device ordinal", "cuda-invalid-device"),
    ("Nov 15 14:15:47 ws1 nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch "
     "driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", "fabric-manager-nothing-to-do"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.1, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", "container-cuda-requirement"),
    ("slurmctld: error: Setting node gpu7 state to INVAL with reason:gres/gpu count reported lower than "
     "configured (3 < 4)", "slurm-gres-count-low"),
    ("   Reason=gres/gpu count reported lower than configured (0 < 8) [slurm@2024-01-01T00:00:00]",
     "slurm-gres-count-low"),
    ("   Reason=Node unexpectedly rebooted [slurm@2022-07-23T15:31:00]", "slurm-node-rebooted"),
    ("srun: error: Plug-in initialization failed", "slurm-spank-init-failed"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 304.00 MiB (GPU 0; 8.00 GiB total capacity)",
     "torch-cuda-oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "ray-memory-monitor"),
    ("Message:          The node was low on resource: memory. Threshold quantity: 1Gi, available: 991045Ki.",
     "k8s-memory-eviction"),
    ("[12345.6] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
     "kernel-oom-report"),
    ("[12345.7] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=python,pid=301882",
     "kernel-oom-report"),
    ("h1:20:35 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, "
     "error: No space left on device (28)", "shm-exhausted"),
    ("h1:20:35 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
     "shm-exhausted"),
    ("Error while creating shared memory segment /dev/shm/nccl-pZafXL (size 7340384)", "shm-exhausted"),
    ("[ERROR] [launch.py:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=0'] exits with return code = -7",
     "bus-error-exit"),
    ("Detected inf/nan during batch_number=0", "numeric-overflow-detected"),
]


@pytest.mark.parametrize(("line", "sig_id"), LINES)
def test_documented_line_is_recognised(line: str, sig_id: str) -> None:
    assert sig_id in ids(line)


@pytest.mark.parametrize("line", [
    # Ordinary progress and set-up lines that share words with the rules above.
    "NCCL INFO Channel 00 : 3[1c0] -> 2[1b0] via direct shared memory",
    "Node gpu7 rebooted by admin request",
    "INFO: gres/gpu count 8 on node gpu7",
    "Fabric manager started: NVSwitch fabric configured",
    "torch.cuda.device_count() = 8; using device ordinal 3",
    "loss scale: 1.0 | grad norm: 0.752 | number of nan iterations: 0",
])
def test_lookalike_lines_are_left_alone(line: str) -> None:
    assert ids(line) == []


# (name, log, category, culprit kind, drain, restart)
VERDICTS: list[tuple[str, list[str], Category, CulpritKind, bool, bool]] = [
    # NVML's RM/library version mismatch: the loaded kernel module is not the installed driver's; the node
    # needs a reboot or a module reload before any GPU job runs there.
    ("nvml-mismatch", ["Failed to initialize NVML: Driver/library version mismatch"],
     Category.NODE_FAILURE, CulpritKind.NODE, True, True),
    # cudaErrorNoDevice: the driver saw no device in this process's view; one log cannot tell an empty
    # CUDA_VISIBLE_DEVICES from a dead GPU, so no drain and no unchanged rerun.
    ("no-device-visible", ["RuntimeError: CUDA error: no CUDA-capable device is detected"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # A hardware line next to it still wins.
    ("no-device-after-xid-79", ["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
                                "RuntimeError: CUDA error: no CUDA-capable device is detected"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True),
    # cudaErrorDevicesUnavailable: the scheduler's GPU is held by another process (exclusive compute mode).
    ("devices-busy", ["RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable"],
     Category.NODE_FAILURE, CulpritKind.NODE, True, True),
    ("invalid-ordinal", ["RuntimeError: CUDA error: invalid device ordinal"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    # Fabric Manager on a machine without NVSwitch: nothing to manage, nothing broken.
    ("fm-nothing-to-do", [
        "ws1 systemd[1]: Starting NVIDIA fabric manager service...",
        "ws1 nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed with "
        "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]",
        "ws1 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False),
    ("fm-real-failure", [
        "ws1 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"],
     Category.NVLINK, CulpritKind.NODE, True, True),
    ("gres-count-low", ["slurmctld: error: Setting node gpu7 state to INVAL with reason:gres/gpu count reported "
                        "lower than configured (3 < 4)"],
     Category.NODE_FAILURE, CulpritKind.NODE, False, True),
    ("node-rebooted", ["   Reason=Node unexpectedly rebooted [slurm@2022-07-23T15:31:00]"],
     Category.NODE_FAILURE, CulpritKind.NODE, False, True),
    ("legacy-cuda-oom", ["RuntimeError: CUDA out of memory. Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total)"],
     Category.OOM, CulpritKind.APP, False, False),
    ("ray-oom", ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."],
     Category.OOM, CulpritKind.APP, False, False),
    ("shm-full", ["h1:20:35 [0] misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment "
                  "/dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
    ("deepspeed-sigbus", ["[ERROR] [launch.py:sigkill_handler] ['python', 'train.py'] exits with return code = -7"],
     Category.APP_ERROR, CulpritKind.APP, False, False),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "drain", "restart"), VERDICTS,
                         ids=[c[0] for c in VERDICTS])
def test_verdict(name: str, log: list[str], category: Category, kind: CulpritKind, drain: bool,
                 restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (category, kind, drain, restart), v.explanation


def test_every_new_rule_names_its_source() -> None:
    new = {sig_id for _, sig_id in LINES} - {"torch-cuda-oom", "bus-error-exit"}
    by_id = {s.id: s for s in CAT.signatures}
    assert all(by_id[i].source for i in new), [i for i in new if not by_id[i].source]


# Launcher and framework errors that a rerun with the same configuration repeats.
LAUNCHER_LINES = [
    ("[future5:12508] [[25215,0],1] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
     "grpcomm_direct.c at line 355", "orte-unpack-past-end"),
    ("[[25215,0],1] FORCE-TERMINATE AT Data unpack would read past end of buffer:-26 - error grpcomm_direct.c(359)",
     "orte-unpack-past-end"),
    (" [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
     "deepspeed-overflow-at-min-scale"),
    ("INFO[0289] Pod: default.kfto-01-master-0 exited with code 1  job=default.kfto-01 replica-type=master",
     "kubeflow-replica-exit-1"),
]


@pytest.mark.parametrize(("line", "sig_id"), LAUNCHER_LINES)
def test_launcher_line_is_recognised(line: str, sig_id: str) -> None:
    assert sig_id in ids(line)


@pytest.mark.parametrize("line", [
    " [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 262144, reducing to 131072.0",
    "INFO[0289] Pod: default.kfto-01-master-0 exited with code 137  job=default.kfto-01",
])
def test_launcher_lookalikes_are_left_alone(line: str) -> None:
    assert not {"deepspeed-overflow-at-min-scale", "kubeflow-replica-exit-1"} & set(ids(line))


def test_a_voided_signature_must_exist() -> None:
    from goodput.diagnose.signatures.loader import CatalogueError, parse
    entry = {"id": "a", "family": "f", "category": "unknown", "culprit_kind": "unknown", "role": "info",
             "precedence": 1, "pattern": "x", "literals": ["x"], "restart": False, "drain": False,
             "voids": ["no-such-signature"], "explanation": "e"}
    with pytest.raises(CatalogueError, match="no-such-signature"):
        parse({"version": 1}, [("f.toml", {"signature": [entry]})])


# Slurm's job state codes (squeue/sacct), as sacct and scontrol print them.
@pytest.mark.parametrize(("log", "category", "restart"), [
    (["JobID           JobName  Partition      State ExitCode",
      "4242            train    gpu        NODE_FAIL      0:0"], Category.NODE_FAILURE, True),
    (["   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)"], Category.NODE_FAILURE, True),
    (["4243            train    gpu        OUT_OF_ME+    0:125"], Category.OOM, False),
    (["   JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null)"], Category.OOM, False),
])
def test_slurm_job_state_codes(log: list[str], category: Category, restart: bool) -> None:
    v = classify_lines(log)
    assert (v.category, v.drain, v.restart) == (category, False, restart), v.explanation


# Kubernetes reports a container killed at its memory limit as OOMKilled (exit code 137).
@pytest.mark.parametrize("line", [
    "      Reason:       OOMKilled",
    '{"lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}',
])
def test_k8s_oomkilled(line: str) -> None:
    v = classify_lines(["    State:          Terminated", line])
    assert (v.category, v.drain, v.restart) == (Category.OOM, False, False), v.explanation


def test_oomkilled_word_in_prose_is_not_a_verdict() -> None:
    assert "k8s-oomkilled" not in ids("checking whether any pod was OOMKilled recently")
