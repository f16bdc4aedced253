"""Verdicts for GPU, NVLink and node-platform faults, each class resting on NVIDIA's documented meaning.

A GPU the driver or NVML can no longer reach (NVML's GPU_IS_LOST, a device handle NVML cannot
create, a card whose PCI config space reads all ones) is the node's hardware: drain and rerun
elsewhere. A Fabric Manager whose version does not match the driver leaves an NVSwitch node unable
to run GPU work: drain. A pending row remap in `nvidia-smi -q` is reported only: it kills nothing and
NVIDIA grades the Xid 63 that records it IGNORE; DCGM's finding of remaps pending after memory errors
has severity ISOLATE: drain for a reset at the next idle, and leave the job alone. An Xid 45 that an
NVLink5 Xid caused, or a contained CUDA error, is an NVLink fault whose bucket the line does not
decide: the job is restarted, the node is not drained on it alone. Lines are synthetic, in the format the vendor prints.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind

K = "Dec  3 10:41:02 gpu-b07 kernel: [ 5120.004411] "
PLUGIN = ("Pod Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc error: code = "
          "Unknown desc = error getting list of preferred allocation devices: unable to retrieve list of available "
          "devices: error creating nvml.Device 3: nvml: {error}, which is unexpected")
XID_63 = K + ("NVRM: Xid (PCI:0000:3b:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu "
              "to activate.")
SMI_Q = ["$ nvidia-smi -q", "GPU 00000000:3B:00.0", "    Product Name                          : NVIDIA A100-SXM4-80GB",
         "    Remapped Rows", "        Correctable Error                 : 0",
         "        Uncorrectable Error               : 1", "        Pending                           : {pending}",
         "        Remapping Failure Occurred        : No"]

class _Diag:
    """A `dcgmi diag -r 1` table whose Error cell wraps over two rows, as DCGM prints it."""

    @staticmethod
    def format(first: str, second: str) -> list[str]:
        return ["+---------------------------+------------------------------------------------+",
                "| Diagnostic                | Result                                         |",
                "+===========================+================================================+",
                "|-----  Deployment  --------+------------------------------------------------|",
                f"| Error                     | GPU 3 {first:<40} |",
                f"|                           |  {second:<45} |"]


DCGM_DIAG = _Diag()

# (name, log, category, culprit kind, drain, restart, signature)
CASES: list[tuple[str, list[str], Category, CulpritKind, bool, bool, str]] = [
    # NVML API Reference, nvmlReturn_t: NVML_ERROR_GPU_IS_LOST (fallen off the bus or inaccessible).
    ("nvml-gpu-is-lost", [PLUGIN.format(error="GPU is lost")],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "nvml-gpu-lost"),
    ("pynvml-gpu-is-lost", ["pynvml.NVMLError_GPUIsLost: GPU is lost"],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "nvml-gpu-lost"),
    # nvmlDeviceGetHandleByIndex failing with NVML_ERROR_UNKNOWN: the device plugin's form of nvidia-smi's
    # "Unable to determine the device handle for GPU ...: Unknown Error".
    ("nvml-device-handle-unknown-error", [PLUGIN.format(error="Unknown Error")],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "nvml-device-handle-failed"),
    # PCI config space of a device that no longer answers reads all ones: lspci shows revision ff.
    ("lspci-nvidia-rev-ff", ["$ lspci | grep -i nvidia",
                             "1a:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] "
                             "(rev a1)",
                             "1c:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev ff)"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "gpu-pci-config-all-ones"),
    # Fabric Manager User Guide: the FM package must be the driver's exact version, or FM does not start.
    ("fabric-manager-driver-mismatch", [
        "Dec  3 10:41:03 gpu-b07 nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version "
        "530.30.02 don't match with driver version 530.41.03. Please update with matching NVIDIA driver package."],
     Category.NVLINK, CulpritKind.NODE, True, True, "fabric-manager-driver-mismatch"),
    # Row remapping: a pending remap takes effect at the next GPU reset; running work may continue
    # (Xid 63's bucket is IGNORE): reported, nothing drained or restarted.
    ("row-remap-pending-is-reported-only", [line.format(pending="Yes") for line in SMI_Q],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False, "gpu-row-remap-pending"),
    ("xid-63-with-remap-pending", [XID_63] + [line.format(pending="Yes") for line in SMI_Q],
     Category.UNKNOWN, CulpritKind.UNKNOWN, False, False, "gpu-row-remap-pending"),
    # DCGM's pending-remap finding (DCGM_FR_PENDING_ROW_REMAP, severity ISOLATE): drain for a reset at the
    # next idle, and leave the job running (the finding ends nothing). Its table wraps the message.
    ("dcgm-pending-remap-drains-without-restart", DCGM_DIAG.format(first="has uncorrectable memory errors and row",
                                                                   second="remappings are pending"),
     Category.GPU_HARDWARE, CulpritKind.NODE, True, False, "gpu-row-remap-isolate"),
    ("dcgm-pending-remap-unwrapped", ["GPU 3 had memory errors and row remappings are pending"],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, False, "gpu-row-remap-isolate"),
    # DCGM_FR_ROW_REMAP_FAILURE: out of spare rows; the GPU keeps failing. Its second half decides. A
    # diagnostic run is a health check, not a job: nothing to restart.
    ("dcgm-failed-remap-wrapped", DCGM_DIAG.format(first="had uncorrectable memory errors and row",
                                                   second="remapping failed."),
     Category.GPU_HARDWARE, CulpritKind.NODE, True, False, "gpu-row-remap-failure"),
    # An Xid whose bucket restarts the job (94, contained ECC: RESTART_APP) says the job died of it; the
    # pending remap adds nothing to the restart decision.
    ("xid-94-then-dcgm-pending-remap", [K + "NVRM: Xid (PCI:0000:3b:00): 94, pid=2211, Contained: CE User "
                                        "Channel (0x9). RST: No, D-RST: No",
                                        "dcgm health: GPU 3 had memory errors and row remappings are pending"],
     Category.GPU_HARDWARE, CulpritKind.GPU, False, True, "xid-94"),
    # PCIe AER: an uncorrectable error the kernel could not recover on the NVIDIA GPU it names (the driver has no
    # AER callbacks): the GPU, by its PCI id, on a node to drain. The root port's summary alone names no GPU.
    ("aer-fatal-gpu-unrecovered", [
        "[  +0.000004] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
        "[  +0.000898] pcieport 0000:00:03.0:    [14] CmpltTO                (First)",
        "[  +0.000921] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
        "[  +0.000001] pcieport 0000:00:03.0: AER: device recovery failed"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "pcie-aer-gpu-unrecovered"),
    ("aer-fatal-root-port-only", [
        "[  +0.000004] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0"],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "pcie-aer-fatal"),
    # Xid 45 caused by an NVLink5 Xid whose decode the line does not carry: the NVLink fault ended the job.
    ("xid-45-after-xid-149", [K + "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused "
                              "by previous Xid 149"],
     Category.NVLINK, CulpritKind.NODE, False, True, "xid-45-after-nvlink5"),
    ("xid-45-after-xid-145", [K + "NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused "
                              "by previous Xid 145"],
     Category.NVLINK, CulpritKind.NODE, False, True, "xid-45-after-nvlink5"),
    # CUDA Driver API, CUresult: CUDA_ERROR_CONTAINED (invalid peer access over NVLink or a hardware
    # error, contained; the process must be relaunched).
    ("cuda-error-contained", ["2026-09-05 17:34:36.549 task 162 rank 1 node-17: CUDA_ERROR_CONTAINED: Invalid "
                              "access of peer GPU memory over nvlink or a hardware error"],
     Category.NVLINK, CulpritKind.NODE, False, True, "cuda-contained"),
    # The kernel driver could not initialise the GPU (the failure Xid 143 GPU_INIT_ERROR reports).
    ("driver-cannot-initialise-the-gpu", [K + "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x25:0x65:1457)",
                                          K + "NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 3"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "gpu-init-failed"),
    # An Xid line whose `NVRM:` prefix a log shipper cut, with a PCI id the poster redacted.
    ("xid-79-without-nvrm-prefix", ["Xid (PCI:0000:??:00): 79 - GPU has fallen off the bus"],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "xid-79"),
    # The kernel's AER report of a fatal uncorrectable error on the device itself: the GPU, by its PCI id.
    ("pcie-bus-error-fatal", [K + "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                              "type=Transaction Layer, (Requester ID)"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "pcie-aer-gpu-unrecovered"),
    # An out-of-memory error on a GPU that has had an uncorrectable ECC error since the driver loaded:
    # nvidia-smi's Volatile Uncorr. ECC column (the third cell of a GPU's first row) says so, and the
    # ECC error is the cause (NVIDIA's bucket for Xid 48: reset the GPU).
    ("oom-on-a-gpu-with-uncorrectable-ecc", [
        "RuntimeError: CUDA error: out of memory",
        "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
        "|   0  Tesla V100-SXM2...  On   | 00000000:00:1D.0 Off |                    0 |",
        "|   1  Tesla V100-SXM2...  On   | 00000000:00:1E.0 Off |                    1 |"],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "smi-volatile-uncorrectable-ecc"),
    # The same after the driver's own report of it: the Xid decides, by its bucket.
    ("oom-after-xid-48", ["RuntimeError: CUDA error: out of memory",
                          K + "NVRM: Xid (PCI:0000:3b:00): 48, pid=2231, name=python3, An uncorrectable double bit "
                          "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."],
     Category.GPU_HARDWARE, CulpritKind.GPU, True, True, "xid-48"),
    ("oom-after-contained-xid-94", ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                                    K + "NVRM: Xid (PCI:0000:3b:00): 94, pid=2231, name=python3, Contained: CE "
                                    "User Channel (0x9). RST: No, D-RST: No"],
     Category.GPU_HARDWARE, CulpritKind.GPU, False, True, "xid-94"),
    # NCCL names the CUDA error behind its "unhandled cuda error": cudaErrorMemoryAllocation (2).
    ("nccl-cuda-failure-2-is-oom", ["enqueue.cc:1556 NCCL WARN Cuda failure 2 'out of memory'",
                                    "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_UNHANDLED_CUDA_ERROR: "
                                    "unhandled cuda error"],
     Category.OOM, CulpritKind.APP, False, False, "nccl-cuda-oom"),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "drain", "restart", "signature"), CASES,
                         ids=[c[0] for c in CASES])
def test_gpu_platform_class(name: str, log: list[str], category: Category, kind: CulpritKind, drain: bool,
                            restart: bool, signature: str) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (category, kind, drain, restart), (
        v.signatures, v.explanation)
    assert signature in v.signatures


def test_lspci_names_the_gpu_that_reads_all_ones() -> None:
    v = classify_lines(["1a:00.0 VGA compatible controller: NVIDIA Corporation TU102GL (rev a1)",
                        "1c:00.0 VGA compatible controller: NVIDIA Corporation TU102GL (rev ff)"])
    assert v.gpu is not None and v.gpu.lower().startswith("1c:00"), v.explanation


@pytest.mark.parametrize("log", [
    # A healthy card, and a non-NVIDIA device that reads all ones, say nothing about a GPU.
    ["1a:00.0 VGA compatible controller: NVIDIA Corporation TU102GL (rev a1)"],
    ["03:00.0 Ethernet controller: Intel Corporation I350 Gigabit Network Connection (rev ff)"],
    # No pending remap, or another field's "Pending", is no fault.
    [line.format(pending="No") for line in SMI_Q],
    ["    MIG Mode", "        Current                           : Disabled",
     "        Pending                           : Disabled"],
    # A GPU whose volatile uncorrectable ECC count is zero (or not reported) is healthy.
    ["| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
     "|   0  Tesla V100-SXM2...  On   | 00000000:00:1D.0 Off |                    0 |",
     "|   1  NVIDIA A100-SXM4-80GB On | 00000000:00:1E.0 Off |                  N/A |"],
    # Xid 63 alone stays NVIDIA's IGNORE bucket.
    [XID_63],
    # AER recovery failing for a device that is not an NVIDIA GPU (its HDMI audio function) names no GPU fault.
    ["[  +0.000001] snd_hda_intel 0000:03:00.1: AER: can't recover (no error_detected callback)"],
])
def test_lines_that_are_no_gpu_fault(log: list[str]) -> None:
    v = classify_lines(log)
    assert (v.drain, v.restart) == (False, False), (v.signatures, v.explanation)


def test_an_unrecovered_aer_error_names_the_gpu_by_its_pci_id() -> None:
    v = classify_lines(["pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
                        "nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)"])
    assert v.culprit_kind is CulpritKind.GPU and v.gpu is not None and v.gpu.lower().startswith("0000:03:00")
