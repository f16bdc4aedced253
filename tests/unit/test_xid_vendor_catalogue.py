"""NVIDIA's Xid catalogue drives the Xid verdicts: a table test generated from the data file itself.

The expectations are read from `data/vendor/nvidia-xid.toml` with tomllib, not through the code
that generates the signatures, so a generator that drifts from the table fails here.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures import default_catalogue
from goodput.models import Category, CulpritKind

CAT = default_catalogue()
TABLE: dict[str, Any] = tomllib.loads(
    resources.files("goodput.diagnose.signatures").joinpath("data", "vendor", "nvidia-xid.toml").read_text("utf-8"))
ROWS: list[dict[str, Any]] = TABLE["xid"]
DECISION = {name: b["decision"] for name, b in TABLE["buckets"].items()}
APP_CHECKS = set(TABLE["job"]["app_investigations"])
K = "Dec  3 10:41:02 gpu-b07 kernel: [ 5120.004411] "
LINE = K + "NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python3, {text}"


def xid_line(code: int, text: str = "Ch 00000010") -> str:
    return LINE.format(code=code, text=text)


def test_the_table_is_nvidias_whole_catalogue_of_xids_in_use() -> None:
    codes = [r["code"] for r in ROWS]
    assert len(codes) == len(set(codes)) == 109
    assert TABLE["catalog"]["version"] and TABLE["catalog"]["url"].startswith("https://docs.nvidia.com/")
    # Every Xid in use has a bucket with a decision in the map ("" is NVIDIA's own: no action stated).
    assert {r["immediate"] for r in ROWS} <= set(DECISION)
    assert set(DECISION.values()) == {"drain", "job", "none", "context"}
    for bucket in ("RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT"):
        assert DECISION[bucket] == "drain"
    assert (DECISION["RESTART_APP"], DECISION["IGNORE"]) == ("job", "none")


@pytest.mark.parametrize("row", ROWS, ids=[f"xid{r['code']}-{r['immediate'] or 'none'}" for r in ROWS])
def test_every_xid_has_its_own_signature_and_follows_its_bucket(row: dict[str, Any]) -> None:
    code, decision = row["code"], DECISION[row["immediate"]]
    line = xid_line(code)
    assert f"xid-{code}" in {m.signature.id for m in CAT.match_line(line, 1)}, "its own signature claims it"
    verdict = classify_lines([line])
    assert f"xid-{code}" in verdict.signatures
    if decision == "drain":
        assert verdict.drain and verdict.restart, f"Xid {code} {row['immediate']} drains and restarts elsewhere"
        assert verdict.culprit_kind in (CulpritKind.GPU, CulpritKind.NODE)
    elif decision == "job":
        assert not verdict.drain, f"a solo RESTART_APP Xid {code} never drains"
        assert verdict.restart is (row["investigatory"] not in APP_CHECKS)
    else:  # none, or a context bucket with nothing on the line to read
        assert not verdict.drain and not verdict.restart, f"Xid {code} ({row['immediate']!r}) decides nothing"
        assert verdict.category is Category.UNKNOWN


def test_every_xid_rule_that_can_drain_names_its_source() -> None:
    draining = [s for s in CAT.signatures if s.family == "xid" and s.drain]
    assert len(draining) > 20
    assert [s.id for s in draining if "NVIDIA" not in s.source] == []


@pytest.mark.parametrize(("code", "text", "drain", "signature"), [
    # Issue #25: an application's illegal NVLink peer access (bucket IGNORE) is not the node's fault...
    (137, "NVLink: RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error", False, "xid-137"),
    # ...while a GPU that stopped processing (RESET_GPU) and a board without auxiliary power
    # (CHECK_MECHANICALS) are.
    (46, "Ch 00000010, GPU stopped processing", True, "xid-46"),
    (54, "Auxiliary power is not connected to the GPU board", True, "xid-54"),
    (63, "Row Remapper: New row marked for remapping, reset gpu to activate.", False, "xid-63"),
    (64, "Row Remapper Error: failed to remap", True, "xid-64"),
])
def test_issue_25_xids(code: int, text: str, drain: bool, signature: str) -> None:
    v = classify_lines([xid_line(code, text)])
    assert (v.drain, signature in v.signatures) == (drain, True)


# --- Xid 144-150: NVIDIA's decode sheet, read from the interrupt info and error status on the line.
N = K + "NVRM: Xid (PCI:0000:04:00): {code}, {unit} {word} XC0 i0 Link 00 ({words})"


@pytest.mark.parametrize(("code", "unit", "word", "words", "signature", "drain"), [
    # NETIR link-down reason 0x25 (bits 25:20 of the interrupt info): RESET_GPU.
    (149, "NETIR_LINK_EVT", "Fatal", "0x025001c6 0x00000000 0x00000000 0x00000000", "xid-149-decoded-fatal", True),
    # Reason 0x26, printed Fatal all the same: NVIDIA's bucket is IGNORE.
    (149, "NETIR_LINK_EVT", "Fatal", "0x026001c6 0x00000000 0x00000000 0x00000000", "xid-149-decoded-nonfatal",
     False),
    # RLW_REMAP status 0x1: XID_154_EVAL, the Xid 154 next to it says whether to act.
    (145, "RLW_REMAP", "Nonfatal", "0x00000004 0x00000001 0x00000000 0x00000000", "xid-145-decoded-eval154", False),
    # RLW_REMAP status 0x40 (printed Nonfatal by a driver that disagrees): RESET_GPU.
    (145, "RLW_REMAP", "Nonfatal", "0x00000004 0x00000040 0x00000000 0x00000000", "xid-145-decoded-fatal", True),
    (144, "SAW_MVB", "Nonfatal", "0x00000001 0x00000008 0x00000000 0x00000000", "xid-144-decoded-nonfatal", False),
    (150, "MSE_WATCHDOG", "Fatal", "0x00000000 0x00000000 0x00000000 0x00000000", "xid-150-decoded-fatal", True),
    # Nothing the sheet knows (a status of two bits at once, a short line): the driver's word decides.
    (145, "RLW_REMAP", "Fatal", "0x00000004 0x000000c0", "xid-nvlink5-fatal", True),
    (145, "RLW_RXPIPE", "Nonfatal", "0x0", "xid-nvlink5-nonfatal", False),
])
def test_nvlink5_xids_are_decoded_as_nvidia_documents(code: int, unit: str, word: str, words: str,
                                                      signature: str, drain: bool) -> None:
    line = N.format(code=code, unit=unit, word=word, words=words)
    assert [m.signature.id for m in CAT.match_line(line, 1)] == [signature]
    assert classify_lines([line]).drain is drain


def test_decode_bits_become_hex_digit_classes() -> None:
    from goodput.diagnose.signatures.vendor import bits_regex
    from goodput.untrusted_text import LinearRegex

    assert bits_regex("0" * 32) == "0" * 8
    regex = LinearRegex(f"^{bits_regex('------000000----------0111000110')}$")
    assert regex.search(b"025001c6") is None  # reason 0x25 is not reason 0
    assert regex.search(b"000001C6") is not None
    assert regex.search(b"fc0001c6") is not None  # the six top bits are free


# --- Xid 154: the recovery action is read from the line.
@pytest.mark.parametrize(("tail", "drain"), [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", True),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", True),
    ("GPU recovery action changed from None to Node Reboot Required", True),
    ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)", False),
    ("GPU recovery action changed", False),
])
def test_xid_154_reads_its_action_from_the_line(tail: str, drain: bool) -> None:
    line = K + f"NVRM: Xid (PCI:0009:01:00): 154, {tail}"
    assert classify_lines([line]).drain is drain


# --- Xid 45: alone a consequence; after another Xid it follows that one; the fabric manager decides itself.
def test_xid_45_alone_is_a_consequence() -> None:
    v = classify_lines([xid_line(45, "Ch 00000010")])
    assert (v.drain, v.restart, v.category) == (False, False, Category.UNKNOWN)


@pytest.mark.parametrize(("previous", "drain"), [(79, True), (48, True), (74, True), (137, False), (13, False),
                                                 (144, True), (145, False), (149, False)])
def test_xid_45_follows_the_xid_it_names(previous: int, drain: bool) -> None:
    assert classify_lines([xid_line(45, f"Ch 00000010, caused by previous Xid {previous}")]).drain is drain


def test_xid_45_with_a_failed_fabric_manager_is_the_node() -> None:
    v = classify_lines([xid_line(45, "Ch 00000010"),
                        "Dec  3 10:41:03 gpu-b07 nv-fabricmanager[2231]: fabric manager failed to initialize NVSwitch"])
    assert v.drain and v.category is Category.NVLINK


# --- Xid 13/31: solo is the application's; repeated under several processes is the GPU, unless every
# fault hit the same address (one program's deterministic out-of-bounds access).
def _xid31(pid: int, address: str) -> str:
    return (K + f"NVRM: Xid (PCI:0000:db:00): 31, pid={pid}, name=python3, Ch 00000008, intr 00000000. "
            f"MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ {address}. Fault is of type FAULT_PDE "
            "ACCESS_TYPE_VIRT_WRITE")


def test_solo_xid_31_is_the_applications_and_never_drains() -> None:
    v = classify_lines([_xid31(13641, "0x7f1c_9a000000")])
    assert (v.category, v.drain, v.restart) == (Category.APP_ERROR, False, False)


def test_repeated_xid_31_at_one_address_is_a_deterministic_application_fault() -> None:
    v = classify_lines([_xid31(pid, "0x7f1c_9a000000") for pid in (13641, 14323, 33275, 35011)])
    assert (v.category, v.culprit_kind, v.drain, v.restart) == (Category.APP_ERROR, CulpritKind.APP, False, False)
    assert "xid-31-same-address" in v.signatures


def test_repeated_xid_31_at_different_addresses_is_the_gpu() -> None:
    v = classify_lines([_xid31(pid, addr) for pid, addr in
                        ((13641, "0x7f1c_9a000000"), (14323, "0x7f20_11200000"), (33275, "0x7e00_0c000000"))])
    assert (v.category, v.drain) == (Category.GPU_HARDWARE, True)


def test_xid_31_from_an_unrecognized_client_is_the_applications_alone() -> None:
    v = classify_lines([_xid31(477445, "0x182400_0030198d").replace("GPCCLIENT_T1_3", "UNRECOGNIZED_CLIENT")])
    assert (v.category, v.drain, v.restart) == (Category.APP_ERROR, False, False)


# --- One signature per Xid must not mean one regex per Xid line: a crowded literal gets an RE2 set.
def _every_regex(line: str) -> list[str]:
    """What the matcher must find: every candidate's regex run on its own (no set)."""
    from goodput.diagnose.signatures.prefixes import split_prefix_bytes
    from goodput.untrusted_text import utf8

    data = utf8(line)
    _, offset = split_prefix_bytes(data)
    hits = [s for s in CAT.candidates(data) if s.regex.search_spans(data[offset:]) is not None]
    lowest = min((s.tier for s in hits), default=0)
    return sorted(s.id for s in hits if s.tier == lowest)


SET_LINES = ([xid_line(r["code"]) for r in ROWS] + [xid_line(45, f"Ch 1, caused by previous Xid {c}") for c in (74, 79)]
             + [N.format(code=149, unit="NETIR_LINK_EVT", word="Fatal", words="0x025001c6 0x00000000"),
                K + "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU "
                "Reset Required)",
                K + "Xid 31 PCI:0000:f0:00 pid=47 ... UNRECOGNIZED_CLIENT ...", K + "NVRM: Xid (PCI:0000:3b:00) 79",
                K + "no Xid here", K + "NVRM: Xid (PCI:0000:3b:00): 999, unknown",
                "Xid 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 14", "gpu-b07: XID 79 detected", "node3 | XID error 48"])


@pytest.mark.parametrize("line", SET_LINES)
def test_the_xid_pattern_set_finds_what_every_regex_finds(line: str) -> None:
    assert sorted(m.signature.id for m in CAT.match_line(line, 1)) == _every_regex(line)


def test_an_empty_answer_from_the_set_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    # RE2 answers nothing when a set's automaton runs out of memory: the matcher then tries every regex.
    from goodput.untrusted_text import PatternSet

    monkeypatch.setattr(PatternSet, "matching", lambda self, data: [])
    line = xid_line(79, "GPU has fallen off the bus.")
    assert [m.signature.id for m in CAT.match_line(line, 1)] == ["xid-79"]


def test_a_pattern_set_names_the_patterns_that_match() -> None:
    from goodput.untrusted_text import LinearPatternError, PatternSet

    patterns = PatternSet([r"Xid \d+", r"Xid 7\d\b", r"^kernel"])
    assert sorted(patterns.matching(b"NVRM: Xid 79, x")) == [0, 1]
    assert patterns.matching(b"nothing") == []
    with pytest.raises(LinearPatternError):
        PatternSet([r"(a)\1"])


# Event pipelines and cloud health reports spell an Xid without the kernel's `NVRM: Xid (PCI:...)`
# head; the number still follows NVIDIA's catalogue. Prose that names an earlier Xid is not an event.
@pytest.mark.parametrize(("line", "signature", "drain"), [
    ("Xid 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 14", "xid-nvlink5-fatal", True),
    ("2026-11-02T10:00:01Z gpu-b07: XID 79 detected on GPU 3", "xid-79", True),
    ("health | XID error 48 on GPU 0000:3b:00", "xid-48", True),
    ("[gpud] Xid: 13 graphics engine exception", "xid-13", False),
    ("Xid=43 reset channel verif error", "xid-43", False),
])
def test_an_xid_spelled_bare_follows_the_catalogue(line: str, signature: str, drain: bool) -> None:
    v = classify_lines([line])
    assert signature in v.signatures, v.signatures
    assert v.drain is drain


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:3b:00): 45, pid=1, Ch 00000008, caused by previous Xid 13",
    "we saw Xid 79 on this node last week",
    "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\"} 79",
])
def test_an_xid_named_in_prose_is_not_an_event(line: str) -> None:
    assert not [s for s in classify_lines([line]).signatures if s in ("xid-13", "xid-79")]
