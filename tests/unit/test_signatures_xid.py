"""Table-driven checks of the Xid family: each code maps to NVIDIA's resolution bucket, and the
line's form (pid, BDF, a fault line broken off) does not change the verdict."""

from __future__ import annotations

import pytest

from goodput.models import Category
from tests.unit.signature_cases import CAT, K, hit, ids

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
