"""The catalogue as data: it loads, it is consistent, and bad data fails at load time."""

from __future__ import annotations

from typing import Any

import pytest

from goodput.diagnose.signatures import Catalogue, CatalogueError, Role, default_catalogue
from goodput.diagnose.signatures.loader import parse
from goodput.models import Category, CulpritKind

CAT = default_catalogue()

META = {"version": 3, "fragments": {"num": r"\d+", "twice": "{num}-{num}"}}


def entry(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "t-1", "family": "t", "category": "gpu-hardware", "culprit_kind": "gpu", "precedence": 10,
        "pattern": "boom {num}", "literals": ["boom"], "restart": True, "drain": False,
        "explanation": "a test rule"}
    base.update(overrides)
    return base


def test_packaged_catalogue_is_versioned_and_covers_every_category_it_needs() -> None:
    assert CAT.version >= 1
    assert len(CAT) >= 90
    categories = {s.category for s in CAT.signatures}
    needed = set(Category) - {Category.HANG, Category.STRAGGLER}  # those two come from detectors mostly
    assert needed <= categories | {Category.HANG}


def test_every_signature_is_exercised_by_an_example_line() -> None:
    # A rule no example reaches is either dead (its literal never occurs where its regex matches)
    # or untested; both are bugs in the catalogue.
    from goodput.diagnose.signatures import cuda_errors
    from goodput.diagnose.signatures.vendor import load_table
    from tests.unit.test_classify_frameworks import FRAMEWORK_LINES
    from tests.unit.test_classify_hca import HCA_LINES
    from tests.unit.test_classify_jax import JAX_LINES
    from tests.unit.test_classify_nvrm import NVRM_LINES
    from tests.unit.test_classify_ray import RAY_LINES, VLLM_LINES
    from tests.unit.test_signatures_families import LINE_CASES
    from tests.unit.test_signatures_families_more import LINE_CASES_MORE
    from tests.unit.test_signatures_reasons import REASON_LINES
    from tests.unit.test_signatures_xid import XID, XID_CASES
    from tests.unit.test_vendor_code_tables import CASES as VENDOR_TABLE_CASES

    cases = (LINE_CASES + LINE_CASES_MORE + REASON_LINES + JAX_LINES + RAY_LINES + HCA_LINES + NVRM_LINES + VLLM_LINES
             + FRAMEWORK_LINES)
    lines = [line for line, _, _ in cases] + [XID.format(code=c[0], tail=c[1]) for c in XID_CASES]
    lines.append(XID.format(code=31, tail="MMU Fault: UNRECOGNIZED_CLIENT"))
    # One line per Xid of NVIDIA's table, one per row of its NVLink5 decode sheet, one per Xid 45 rule.
    table = load_table()
    lines += [XID.format(code=row.code, tail="Ch 00000010") for row in table.rows]
    lines += [XID.format(code=r.xid, tail=f"{r.unit} XC0 i0 Link 00 (0x{int(r.bits_v2.replace('-', '0'), 2):08x} "
                                          f"0x{r.status:08x} 0x00000000 0x00000000)") for r in table.decode]
    lines += [XID.format(code=45, tail=f"Ch 00000010, caused by previous Xid {code}") for code in (74, 79)]
    # One line per code of CUDA's error table, as PyTorch prints it.
    lines += [f"RuntimeError: CUDA error: {e.message}" for e in cuda_errors.load_table().rows]
    # Every row of the other vendor tables, in every spelling their own test sends through.
    lines += [line for *_, line in VENDOR_TABLE_CASES]
    reached = {m.signature.id for line in lines for m in CAT.match_line(line, 1)}
    assert sorted(s.id for s in CAT.signatures if s.id not in reached) == []


def test_root_causes_outrank_consequences_by_precedence() -> None:
    knock_on = [s for s in CAT.signatures if s.role is Role.KNOCK_ON]
    assert {"nccl-abort-cascade", "slurm-failed-banner", "elastic-closing-siblings",
            "elastic-child-failed"} <= {s.id for s in knock_on}
    assert all(not s.drain for s in knock_on), "a consequence never drains a node"
    hw = CAT.get("xid-79")
    app = CAT.get("python-exception")
    nccl = CAT.get("nccl-watchdog-timeout")
    assert hw and app and nccl
    assert hw.precedence > app.precedence > nccl.precedence


def test_application_faults_never_drain() -> None:
    # Without exception: NVIDIA's bucket for an application's Xid (13, 31, even from an unrecognized
    # client) is RESTART_APP, never a drain; a GPU the fault left wedged says so with an Xid of its own.
    for sig in CAT.signatures:
        if sig.category in (Category.APP_ERROR, Category.OOM, Category.SCHEDULER_POLICY, Category.STORAGE):
            assert not sig.drain, sig.id
        if sig.culprit_kind is CulpritKind.APP:
            assert not sig.drain, sig.id


# Drained once, with a document that says the line alone does not implicate the node: they drain
# no more (catalogue 10); the driver's Xid or the HCA's own evidence decides instead.
STOPPED_DRAINING = {"cuda-unknown-error", "mlx5-cqe-error"}


def test_every_drain_rule_names_its_source() -> None:
    # Issue #25: no drain may rest on how threads read a line. Until catalogue 10 an allowlist
    # (`UNSOURCED_DRAINS`) held the rules without one; each was sourced or stopped draining.
    unsourced = {s.id for s in CAT.signatures if s.drain and not s.source.strip()}
    assert sorted(unsourced) == [], "name the document and section in `source`, or do not drain"


def test_lines_whose_documents_implicate_no_node_do_not_drain() -> None:
    for rule in STOPPED_DRAINING:
        sig = CAT.get(rule)
        assert sig is not None and not sig.drain and sig.source.strip(), rule


def test_fragments_expand_recursively() -> None:
    version, sigs = parse(META, [("t.toml", {"signature": [entry(pattern="x {twice}")]})])
    assert version == 3
    assert sigs[0].pattern == r"x \d+-\d+"
    assert Catalogue(sigs).match_line("boom x 12-7")


@pytest.mark.parametrize(("bad", "message"), [
    (entry(pattern="boom {nope}"), "unknown fragment"),
    (entry(pattern="boom (unclosed"), "does not compile"),
    (entry(pattern="boom (?P<secret>x)"), "unknown named groups"),
    (entry(literals=[""]), "empty literal"),
    (entry(literals=[]), "literals"),
    (entry(category="gpu-on-fire"), "category"),
    (entry(role="maybe"), "role"),
])
def test_bad_entries_fail_at_load_time(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        parse(META, [("bad.toml", {"signature": [bad]})])


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(CatalogueError, match="duplicate"):
        parse(META, [("a.toml", {"signature": [entry()]}), ("b.toml", {"signature": [entry()]})])


def test_version_is_required() -> None:
    with pytest.raises(CatalogueError, match="version"):
        parse({}, [])


def test_the_catalogue_document_lists_every_signature() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "failure-catalogue.md").read_text(encoding="utf-8")
    assert [s.id for s in CAT.signatures if f"`{s.id}`" not in doc] == []


def test_the_catalogue_document_is_generated_from_the_data() -> None:
    from pathlib import Path

    from goodput.diagnose.signatures.table import render, replace_section

    doc = (Path(__file__).resolve().parents[2] / "docs" / "failure-catalogue.md").read_text(encoding="utf-8")
    assert replace_section(doc, render()) == doc, "run python -m goodput.diagnose.signatures.table --write"


def test_no_prefilter_literal_is_a_bare_number() -> None:
    # A literal like "802" occurs in timestamps, pids and step counters: it would send most batches of
    # a clean log down the slow per-line path (the throughput benchmark caught one).
    assert [(s.id, lit) for s in CAT.signatures for lit in s.literals if lit.strip().isdigit()] == []
