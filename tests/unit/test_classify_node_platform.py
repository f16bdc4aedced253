"""Verdicts for node-platform classes (issue #25, round 3), each resting on a documented meaning.

A prompt without `user@` (bash's `\\h:\\w\\$`) still names the host whose output follows it. The
node's NVIDIA software stack that cannot come up (the kernel module refused by modpost, the
installer unable to build it, nvidia-persistenced failing to start) is the node's image, not its
hardware and not the job: no drain, and no unchanged rerun. The Kubernetes device plugin's form
of an Xid event follows NVIDIA's bucket like the kernel's line. Segfaults inside NVIDIA's user-mode
driver (libcuda) at one offset from several processes are the node's driver; one is a crash like
any other. A stall on a node whose PCI bridges have ACS enabled (NCCL: ACS redirects peer-to-peer
traffic and can hang it) is the node's platform. Lines are synthetic, in the format each tool prints.
"""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind

K = "Dec  3 10:41:02 gpu-b07 kernel: [ 5120.004411] "
# The kernel's report of a user-space segfault (arch/x86/mm/fault.c, show_signal_msg): the faulting
# instruction pointer and the mapping it lies in, with the mapping's base. ASLR moves the base per
# process; the offset (ip - base) is the instruction in the library.
SEGV = ("{comm}[{pid}]: segfault at 18 ip {ip:016x} sp 00007ffd5d2e9a80 error 4 in "
        "libcuda.so.535.104.05[{base:x}+1e00000]")
BASES = (0x7F2A61800000, 0x7F9C12000000, 0x7F0B3A400000)


def segv(pid: int, base: int, offset: int = 0x43B5E4, comm: str = "python3", tail: str = "") -> str:
    return K + SEGV.format(comm=comm, pid=pid, ip=base + offset, base=base) + tail


ACS_ON = "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFF = "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
TIMEOUT = ("[rank0]:[E1203 10:52:01.000000 4101 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
           "ran for 600011 milliseconds before timing out.")

# (name, log, category, culprit kind, drain, restart, signature)
CASES: list[tuple[str, list[str], Category, CulpritKind, bool, bool, str]] = [
    # Linux kernel, Documentation/process/license-rules.rst (MODULE_LICENSE: GPL-only symbols are refused
    # to a module that is not GPL-compatible); the NVIDIA module is built against the running kernel.
    ("nvidia-module-refused-by-modpost", [
        "ERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol 'rcu_read_unlock_strict'"],
     Category.NODE_FAILURE, CulpritKind.NODE, False, False, "nvidia-module-build-failed"),
    ("nvidia-installer-cannot-build-the-module", [
        "ERROR: Unable to build the NVIDIA kernel module."],
     Category.NODE_FAILURE, CulpritKind.NODE, False, False, "nvidia-module-build-failed"),
    # systemctl(1): the start job of the unit failed; NVIDIA driver README, nvidia-persistenced.
    ("persistenced-start-failed", [
        "STDERR: Error: 'systemctl start nvidia-persistenced.service' failed with",
        "'Job for nvidia-persistenced.service failed because the control process exited with error code."],
     Category.NODE_FAILURE, CulpritKind.NODE, False, False, "nvidia-persistenced-failed"),
    ("persistenced-unit-failed", ["Dec 03 10:41:02 gpu-b07 systemd[1]: Failed to start NVIDIA Persistence Daemon."],
     Category.NODE_FAILURE, CulpritKind.NODE, False, False, "nvidia-persistenced-failed"),
    # NVIDIA k8s-device-plugin's health check logs the Xid events it watches through NVML: the Xid
    # follows NVIDIA's catalogue exactly as the kernel's line does.
    ("device-plugin-xid-79", ["2020/08/10 19:09:42 XidCriticalError: Xid=79 on Device=GPU-7540a9b3-eeb9-1214-1526-"
                              "f93c9ea826a8, the device will go unhealthy."],
     Category.GPU_HARDWARE, CulpritKind.NODE, True, True, "xid-79"),
    ("device-plugin-xid-13", ["2020/08/10 19:09:42 XidCriticalError: Xid=13 on Device=GPU-7540a9b3-eeb9-1214-1526-"
                              "f93c9ea826a8; marking device as unhealthy."],
     Category.APP_ERROR, CulpritKind.APP, False, False, "xid-13"),
    # Three processes crash at one instruction of NVIDIA's user-mode driver on one node.
    ("libcuda-segfaults-at-one-offset", [segv(4101, BASES[0]), segv(4188, BASES[1]), segv(4230, BASES[2])],
     Category.NODE_FAILURE, CulpritKind.NODE, True, True, "libcuda-segfault-recurring"),
    ("libcuda-segfaults-newer-kernel-format", [
        segv(4101 + i, b, tail=f" likely on CPU {i} (core {i}, socket 0)") for i, b in enumerate(BASES)],
     Category.NODE_FAILURE, CulpritKind.NODE, True, True, "libcuda-segfault-recurring"),
    # One such crash is the program's (or a one-off): restart once, drain nothing.
    ("one-libcuda-segfault", [segv(4101, BASES[0])],
     Category.APP_ERROR, CulpritKind.APP, False, True, "kernel-segfault-libcuda"),
    # The same process reported three times, or crashes at different instructions, prove nothing.
    ("libcuda-segfaults-one-process", [segv(4101, BASES[0])] * 3,
     Category.APP_ERROR, CulpritKind.APP, False, True, "kernel-segfault-libcuda"),
    ("libcuda-segfaults-different-offsets", [segv(4101, BASES[0], 0x43B5E4), segv(4188, BASES[1], 0x1200),
                                             segv(4230, BASES[2], 0x98AC0)],
     Category.APP_ERROR, CulpritKind.APP, False, True, "kernel-segfault-libcuda"),
    # NCCL User Guide, Troubleshooting, PCI Access Control Services (ACS): ACS redirects peer-to-peer
    # traffic through the root complex and can hang it; `lspci -vvv` showing SrcValid+ says it is on.
    ("stall-with-acs-enabled", ["root@gpu-b07:~# lspci -vvv | grep ACSCtl", ACS_ON, ACS_ON, TIMEOUT],
     Category.HANG, CulpritKind.NODE, True, True, "p2p-blocked-by-acs"),
]


@pytest.mark.parametrize(("name", "log", "category", "kind", "drain", "restart", "signature"), CASES,
                         ids=[c[0] for c in CASES])
def test_node_platform_class(name: str, log: list[str], category: Category, kind: CulpritKind, drain: bool,
                             restart: bool, signature: str) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (category, kind, drain, restart), (
        v.signatures, v.explanation)
    assert signature in v.signatures


def test_libcuda_segfaults_name_their_node() -> None:
    v = classify_lines([segv(4101, BASES[0]), segv(4188, BASES[1]), segv(4230, BASES[2])])
    assert v.host == "gpu-b07", v.explanation


def test_acs_stall_names_the_prompts_host() -> None:
    v = classify_lines(["root@gpu-b07:~# lspci -vvv | grep ACSCtl", ACS_ON, TIMEOUT])
    assert (v.host, v.signatures[0]) == ("gpu-b07", "p2p-blocked-by-acs"), v.explanation
    assert v.confidence != "high", "NCCL says ACS *might* be the cause: the rule does not settle the verdict"


@pytest.mark.parametrize(("prompt", "host"), [
    ("gpu-b07:~$ lspci | grep -i nvidia", "gpu-b07"),
    ("dgx-3.cluster:/var/log# lspci | grep -i nvidia", "dgx-3.cluster"),
    ("hoth:~/scratch$ lspci", "hoth"),
])
def test_prompt_without_user_names_the_host(prompt: str, host: str) -> None:
    v = classify_lines([prompt, "1c:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev ff)"])
    assert (v.host, v.drain) == (host, True), v.explanation


@pytest.mark.parametrize("line", [
    "see http://gpu-b07/status# for details",
    "http://gpu-b07/status# for details",
    "cost:/unit $ 5",
    "warning: ~$ is not set",
    "ERROR: 12:30 $ retry",
])
def test_lines_that_are_no_bare_prompt(line: str) -> None:
    v = classify_lines([line, "1c:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev ff)"])
    assert v.host is None, (line, v.explanation)


@pytest.mark.parametrize("log", [
    # ACS enabled on a healthy node is no failure: only a stall next to it says P2P traffic hung.
    ["root@gpu-b07:~# lspci -vvv | grep ACSCtl", ACS_ON],
    # Another driver module refused by modpost is not the GPU stack.
    ["ERROR: modpost: GPL-incompatible module foo.ko uses GPL-only symbol 'rcu_read_unlock_strict'"],
    # An Xid the catalogue grades IGNORE, in the device plugin's form, decides nothing.
    ["XidCriticalError: Xid=63 on Device=GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8, the device will go unhealthy."],
])
def test_lines_that_are_no_node_fault(log: list[str]) -> None:
    v = classify_lines(log)
    assert (v.drain, v.restart) == (False, False), (v.signatures, v.explanation)


def test_acs_disabled_leaves_the_stall_to_its_own_rules() -> None:
    v = classify_lines(["root@gpu-b07:~# lspci -vvv | grep ACSCtl", ACS_OFF, TIMEOUT])
    assert "p2p-blocked-by-acs" not in v.signatures and not v.drain, v.explanation


# NVIDIA's Xid catalogue: an Xid whose immediate action is RESTART_APP and whose investigatory action is
# CONTACT_SUPPORT asks for the application to be restarted, and for support if it persists. Once: the
# job's (restart, no drain). Again on the same GPU under another process (the restart did not clear
# it): the GPU needs an operator (drain).
def _contact_support_codes() -> list[int]:
    from goodput.diagnose.signatures.vendor import Decision, load_table

    table = load_table()
    return [r.code for r in table.rows
            if table.bucket(r.immediate).decision is Decision.JOB and r.investigatory == "CONTACT_SUPPORT"]


CONTACT_SUPPORT_CODES = _contact_support_codes()
XIDL = K + "NVRM: Xid (PCI:{pci}): {code}, pid={pid}, name=python3, Ch 00000010"


def test_the_catalogue_has_restart_app_xids_that_ask_for_support() -> None:
    assert 8 in CONTACT_SUPPORT_CODES and 13 not in CONTACT_SUPPORT_CODES and 69 not in CONTACT_SUPPORT_CODES


@pytest.mark.parametrize("code", CONTACT_SUPPORT_CODES)
def test_contact_support_xid_that_recurs_on_one_gpu_drains(code: int) -> None:
    v = classify_lines([XIDL.format(pci="0000:3b:00", code=code, pid=4101),
                        XIDL.format(pci="0000:3b:00", code=code, pid=5230)])
    assert (v.category, v.drain, v.restart) == (Category.GPU_HARDWARE, True, True), v.explanation
    assert v.signatures[0] == "xid-recurring-contact-support" and v.gpu == "0000:3b:00", v.explanation


@pytest.mark.parametrize("code", CONTACT_SUPPORT_CODES)
def test_contact_support_xid_once_is_the_jobs(code: int) -> None:
    v = classify_lines([XIDL.format(pci="0000:3b:00", code=code, pid=4101)])
    assert (v.drain, v.restart) == (False, True), v.explanation


@pytest.mark.parametrize("log", [
    # One process reporting it twice: the application was not restarted in between.
    [XIDL.format(pci="0000:3b:00", code=8, pid=4101)] * 2,
    # Two GPUs once each: no GPU saw it twice.
    [XIDL.format(pci="0000:3b:00", code=8, pid=4101), XIDL.format(pci="0000:5e:00", code=8, pid=5230)],
    # RESTART_APP whose investigation is the application's (Xid 69: CHECK_APP/CUDA) drains nothing.
    [XIDL.format(pci="0000:3b:00", code=69, pid=4101), XIDL.format(pci="0000:3b:00", code=69, pid=5230)],
])
def test_no_recurrence_drains_nothing(log: list[str]) -> None:
    assert not classify_lines(log).drain


# nvidia-smi(1), -q: "Attached GPUs" is the number of GPUs in the system, and each GPU's section starts
# with its bus id. A GPU fault on a node with one GPU is that GPU, even where the fault line names none.
PLUGIN_UNKNOWN = ("error getting list of preferred allocation devices: unable to retrieve list of available devices: "
                  "error creating nvml.Device 0: nvml: Unknown Error, which is unexpected")
SMI_A = ["$ nvidia-smi -a", "Driver Version                            : 535.54.03",
         "Attached GPUs                             : {count}", "GPU 00000000:00:1E.0",
         "    Product Name                          : NVIDIA A10G"]


def test_the_only_gpu_of_the_node_is_the_culprit() -> None:
    v = classify_lines([PLUGIN_UNKNOWN] + [line.format(count=1) for line in SMI_A])
    assert (v.culprit_kind, v.gpu, v.drain) == (CulpritKind.GPU, "00000000:00:1E.0", True), v.explanation


@pytest.mark.parametrize("log", [
    # Eight GPUs attached: the one section shown is not necessarily the failed one.
    [PLUGIN_UNKNOWN] + [line.format(count=8) for line in SMI_A],
    # The table was printed on another host than the fault.
    ["gpu-b07: " + PLUGIN_UNKNOWN, "root@gpu-c01:~# nvidia-smi -a"] + [line.format(count=1) for line in SMI_A[1:]],
])
def test_no_only_gpu_when_the_log_does_not_say_so(log: list[str]) -> None:
    v = classify_lines(log)
    assert v.gpu is None, v.explanation


# Linux kernel documentation: admin-guide/lockup-watchdogs.rst (a soft or hard lockup: a CPU looping in
# kernel mode; by default the system stays locked up) and admin-guide/ras.rst (EDAC: CE corrected, UE
# uncorrected; an uncorrected memory error is not recoverable) and the x86 MCE handler's fatal report.
NODE_CASES: list[tuple[str, list[str], bool, str]] = [
    ("soft-lockup", [K + "watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python3:4101]"], True,
     "kernel-cpu-lockup"),
    ("hard-lockup", [K + "NMI watchdog: Watchdog detected hard LOCKUP on cpu 5"], True, "kernel-cpu-lockup"),
    ("edac-uncorrected", [K + "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 "
                          "slot:0 page:0x12345 offset:0x0 grain:32)"], True, "host-memory-uncorrectable"),
    ("edac-skx-uncorrected", [K + "EDAC skx MC1: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#0_DIMM#0"], True,
     "host-memory-uncorrectable"),
    ("fatal-machine-check", [K + "Kernel panic - not syncing: Fatal machine check"], True, "machine-check-fatal"),
    # IPMI v2.0, sensor type Memory (0Ch) offset 01h, as the BMC's event log names it, and as ipmitool prints it.
    ("ipmi-uncorrectable-ecc", [K + "ipmi-sel: Uncorrectable ECC / other uncorrectable memory error @P2-DIMMF1 "
                                "- Assertion"], True, "host-memory-uncorrectable-ipmi"),
    ("ipmitool-uncorrectable-ecc", [K + "ipmi-sel:   1 | 12/03/2026 | 10:41:02 | Memory #0x87 | Uncorrectable ECC | "
                                    "Asserted"], True, "host-memory-uncorrectable-ipmi"),
]


@pytest.mark.parametrize(("name", "log", "drain", "signature"), NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_kernel_node_failure(name: str, log: list[str], drain: bool, signature: str) -> None:
    v = classify_lines(log)
    assert (v.category, v.culprit_kind, v.drain, v.restart, v.host) == (
        Category.NODE_FAILURE, CulpritKind.NODE, drain, True, "gpu-b07"), (v.signatures, v.explanation)
    assert v.signatures[0] == signature


@pytest.mark.parametrize("line", [
    K + "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345)",
    K + "mce: [Hardware Error]: Machine check events logged",
    K + "watchdog: watchdog0: watchdog did not stop!",
    K + "ipmi-sel: Uncorrectable ECC / other uncorrectable memory error @P2-DIMMF1 - Deassertion",
    K + "ipmi-sel:   2 | 12/03/2026 | 10:41:09 | Memory #0x87 | Uncorrectable ECC | Deasserted",
    K + "ipmi-sel: Correctable ECC / other correctable memory error @P1-DIMMA1 - Assertion",
])
def test_corrected_or_harmless_kernel_lines_drain_nothing(line: str) -> None:
    v = classify_lines([line])
    assert (v.drain, v.restart) == (False, False), (v.signatures, v.explanation)
