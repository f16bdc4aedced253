"""What a node says when it cannot start the job's work. The NVIDIA kernel driver (nv.c, nv-pci.c,
the RM's GSP boot; 535 and 595 wordings): each is the node's, drained and rerun elsewhere, and the
line that says why outranks the probe's summary. slurmstepd (task.c, jobacct_gather.c): a program
that cannot be executed is the job's, the batch script gone from the spool is the node's."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category
from tests.unit.signature_cases import check_line_case

K = "Dec  5 10:00:01 gpu-b07 kernel: "

NVRM_LINES: list[tuple[str, str, dict[str, str]]] = [
    (K + "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system is not supported by the "
     "NVIDIA 470.239.06 driver release.", "nvrm-driver-unsupported-gpu", {}),
    (K + "NVRM: GPU 0000:3b:00.0: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:1db6) is not supported by open "
     "nvidia.ko because it does not include the required GPU System Processor (GSP).", "nvrm-driver-unsupported-gpu",
     {}),
    (K + "NVRM: API mismatch: the client has the version 550.54.15, but", "nvrm-api-mismatch", {}),
    (K + "NVRM: API mismatch: the client nvidia-smi (pid 4242) has the version 575.51.02, but",
     "nvrm-api-mismatch", {}),
    (K + "NVRM: No firmware image found", "nvrm-gsp-firmware-missing", {}),
    (K + "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x61:0x0:1781)", "nvrm-gsp-firmware-missing", {}),
    (K + "NVRM: kgspBootstrap_TU102: unexpected WPR2 already up, cannot proceed with booting GSP",
     "nvrm-gsp-boot-failed", {}),
    (K + "NVRM: GPU0 kgspInitRm_IMPL: Cannot initialize GSP firmware RM", "nvrm-gsp-boot-failed", {}),
    (K + "NVRM: GPU0 kgspInitRm_IMPL: Max GSP-RM boot attempts exceeded", "nvrm-gsp-boot-failed", {}),
    (K + "NVRM: kfspSendBootCommands_GH100: FSP boot command failed.", "nvrm-gsp-boot-failed", {}),
    (K + "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:", "nvrm-platform-resources", {}),
    (K + "NVRM: GPU 0000:3b:00.0: Fatal Error while attempting to resize PCIe BARs.", "nvrm-platform-resources", {}),
    (K + "NVRM: GPU 0000:3b:00.0: Cannot configure the device for DMA", "nvrm-platform-resources", {}),
    (K + "NVRM: GPU 0000:3b:00.0: GPU does not have the necessary power cables connected.", "nvrm-power-cables", {}),
    (K + "NVRM: The NVIDIA probe routine failed for 1 device(s).", "nvrm-probe-failed", {}),
    (K + "NVRM: None of the NVIDIA devices were initialized.", "nvrm-probe-failed", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), NVRM_LINES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(NVRM_LINES)])
def test_nvrm_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


@pytest.mark.parametrize("line", [c[0] for c in NVRM_LINES])
def test_a_gpu_or_driver_that_cannot_come_up_drains_the_node(line: str) -> None:
    v = classify_lines([line])
    assert (v.drain, v.restart) == (True, True)
    assert v.category in (Category.NODE_FAILURE, Category.GPU_HARDWARE)


def test_the_reason_outranks_the_probes_summary() -> None:
    v = classify_lines([NVRM_LINES[0][0], NVRM_LINES[14][0], NVRM_LINES[15][0]])
    assert v.signatures[0] == "nvrm-driver-unsupported-gpu"


def test_missing_gsp_firmware_is_the_nodes_installation_not_the_gpu() -> None:
    v = classify_lines([NVRM_LINES[4][0], NVRM_LINES[5][0]])
    assert v.category is Category.NODE_FAILURE


def test_slurmstepds_own_failures_to_start_a_task_are_told_apart() -> None:
    """task.c: a program the job named that cannot be executed is the job's; the batch script gone
    from the node's spool is the node's (slurmstepd-script-missing outranks on its own line)."""
    program = classify_lines(["slurmstepd: error: execve(): train.sh: No such file or directory"])
    assert (program.category, program.restart, program.drain) == (Category.APP_ERROR, False, False)
    spool = classify_lines(["slurmstepd: error: execve(): /var/spool/slurmd/job04242/slurm_script: No such file or "
                            "directory"])
    assert (spool.category, spool.drain) == (Category.NODE_FAILURE, True)
    limit = classify_lines(["slurmstepd: error: StepId=4242.0 exceeded memory limit (68719476736 > 68719476736), "
                            "being killed"])
    assert (limit.category, limit.restart, limit.drain) == (Category.OOM, False, False)


@pytest.mark.parametrize("line", [
    "ahci 0000:00:17.0: Cannot configure the device for DMA",
    "pcieport 0000:00:01.0: Fatal Error while attempting to resize PCIe BARs",
    "fwupd: FSP boot command failed",
])
def test_generic_phrases_are_the_nvidia_drivers_only_on_its_own_lines(line: str) -> None:
    v = classify_lines([line])
    assert (v.drain, v.restart) == (False, False), v.signatures
