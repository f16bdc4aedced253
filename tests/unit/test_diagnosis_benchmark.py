"""The diagnosis corpus and its benchmark: the manifest is sound and the scoring means what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.diagnosis import CORPUS, Excerpt, culprit_correct, evaluate, load_corpus
from goodput.diagnose.signatures.verdict import SOURCE_NODE, Verdict
from goodput.models import Category, CulpritKind

PROVENANCE = re.compile(r"^[\w.\-]+/[\w.\-]+(?:#\d+|:\S+)$")


def label(**overrides: object) -> Excerpt:
    fields: dict[str, object] = dict(
        id="gpu-001", file="excerpts/gpu/gpu-001.log", provenance="NVIDIA/nccl#1", url="https://github.com/x",
        source="issue", category="gpu-hardware", culprit_kind="gpu", culprit_host="n1", culprit_gpu="0000:3b:00",
        drain=True, restart=True, why="Xid 79 on n1 GPU 3b: fell off the bus.")
    fields.update(overrides)
    return Excerpt.model_validate(fields)


def verdict(**overrides: object) -> Verdict:
    fields: dict[str, object] = dict(category=Category.GPU_HARDWARE, culprit_kind=CulpritKind.GPU,
                                     culprit="n1 GPU 0000:3b:00.0", host="n1", gpu="0000:3B:00.0", restart=True,
                                     drain=True, explanation="x")
    fields.update(overrides)
    return Verdict.model_validate(fields)


def test_the_corpus_is_big_enough_and_every_excerpt_has_its_provenance() -> None:
    excerpts = load_corpus()
    assert len(excerpts) >= 400 and len({e.provenance for e in excerpts}) >= 300  # the diagnosis issue's floor
    assert len({e.family for e in excerpts}) >= 5
    assert sum(e.benign for e in excerpts) >= 15
    for e in excerpts:
        assert PROVENANCE.match(e.provenance), e.id
        assert (CORPUS / e.file).stat().st_size > 0, e.id
        assert e.file == f"excerpts/{e.family}/{e.id}.log", e.id


def test_labels_are_coherent() -> None:
    for e in load_corpus():
        if e.benign:
            assert (e.category, e.culprit_kind, e.drain, e.restart) == (
                Category.UNKNOWN, CulpritKind.UNKNOWN, False, False), e.id
        if e.drain and e.culprit_kind not in (CulpritKind.GPU, CulpritKind.NODE):
            assert "reboot" in e.why, e.id  # software wedged the node: drained to reboot it, not to replace it
        if e.source_node:
            assert not e.culprit_host and e.drain, e.id
        if e.culprit_host:
            assert e.culprit_host in (CORPUS / e.file).read_text(encoding="utf-8", errors="replace"), e.id


@pytest.mark.parametrize(("want", "got", "correct"), [
    (label(), verdict(), True),                                     # PCI ids compare on bus:device
    (label(), verdict(gpu="0000:3c:00.0"), False),                  # another GPU
    (label(), verdict(host="n2"), False),                           # another host
    (label(culprit_gpu=""), verdict(culprit_kind=CulpritKind.NODE, gpu=None), True),
    (label(culprit_host="", culprit_gpu="", source_node=True),
     verdict(culprit_kind=CulpritKind.NODE, culprit=SOURCE_NODE, host=None, gpu=None), True),
    (label(culprit_host="", culprit_gpu="", source_node=True),
     verdict(culprit_kind=CulpritKind.NODE, culprit=None, host=None, gpu=None, drain=False), False),
    (label(category="app-error", culprit_kind="app", culprit_host="", culprit_gpu="", culprit_rank=3,
           drain=False, restart=False),
     verdict(category=Category.APP_ERROR, culprit_kind=CulpritKind.APP, culprit="rank 3", rank=3, host=None,
             gpu=None), True),
    (label(category="app-error", culprit_kind="app", culprit_host="", culprit_gpu="", culprit_rank=3,
           drain=False, restart=False),
     verdict(category=Category.APP_ERROR, culprit_kind=CulpritKind.APP, culprit="rank 0", rank=0, host=None,
             gpu=None), False),
    (label(category="unknown", benign=True, culprit_kind="unknown", culprit_host="", culprit_gpu="",
           drain=False, restart=False),
     verdict(category=Category.UNKNOWN, culprit_kind=CulpritKind.UNKNOWN, culprit=None, host=None, gpu=None), True),
    (label(category="unknown", benign=True, culprit_kind="unknown", culprit_host="", culprit_gpu="",
           drain=False, restart=False), verdict(), False),
])
def test_culprit_scoring(want: Excerpt, got: Verdict, correct: bool) -> None:
    assert culprit_correct(want, got) is correct


def test_a_drain_the_labels_do_not_call_for_and_an_action_on_a_benign_log_are_counted(tmp_path: Path) -> None:
    (tmp_path / "excerpts" / "gpu").mkdir(parents=True)
    (tmp_path / "excerpts" / "gpu" / "gpu-001.log").write_text(
        "Nov 29 07:41:02 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
    (tmp_path / "excerpts" / "gpu" / "gpu-002.log").write_text("step 10 | loss 2.0\n")
    excerpts = [label(drain=False, why="labelled wrongly on purpose"),
                label(id="gpu-002", file="excerpts/gpu/gpu-002.log", category="unknown", benign=True,
                      culprit_kind="unknown", culprit_host="", culprit_gpu="", drain=False, restart=False)]
    result = evaluate(excerpts, tmp_path)
    assert result["n"] == 2 and result["false_drains"] == ["gpu-001"] and result["benign_actions"] == []
    assert result["accuracy"] == {"category": 1.0, "drain": 0.5, "restart": 1.0, "culprit": 1.0}
    assert [m["id"] for m in result["misses"]] == ["gpu-001"]


def test_each_later_batch_of_the_test_fold_is_reported_on_its_own(tmp_path: Path) -> None:
    (tmp_path / "excerpts" / "gpu").mkdir(parents=True)
    xid = "Nov 29 07:41:02 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    for name in ("gpu-001", "gpu-002", "gpu-003"):
        (tmp_path / "excerpts" / "gpu" / f"{name}.log").write_text(xid)
    # NVIDIA/nccl#3 and #8 hash to the test fold, #1 to training (pinned below).
    excerpts = [label(provenance="NVIDIA/nccl#3", batch=1),
                label(id="gpu-002", file="excerpts/gpu/gpu-002.log", provenance="NVIDIA/nccl#8", batch=2,
                      drain=False, why="labelled wrongly on purpose"),
                label(id="gpu-003", file="excerpts/gpu/gpu-003.log", provenance="NVIDIA/nccl#1", batch=2)]
    result = evaluate(excerpts, tmp_path)
    by_batch = result["test_unseen_by_batch"]
    assert sorted(by_batch) == ["1", "2"] and result["test_unseen"]["n"] == 2
    assert (by_batch["1"]["n"], by_batch["1"]["drain"]) == (1, 1.0)
    assert (by_batch["2"]["n"], by_batch["2"]["drain"]) == (1, 0.0)


def test_a_manifest_with_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match="culprit_hots"):
        label(culprit_hots="n1")


def test_the_fold_of_a_source_is_fixed_by_its_provenance_alone() -> None:
    from benchmarks.diagnosis import fold_of
    # Pinned: a changed hash or share would silently move sources between folds.
    assert [fold_of(p) for p in ("NVIDIA/nccl#1", "pytorch/pytorch#123456", "NVIDIA/nccl#3")] == [
        "train", "train", "test"]
    excerpts = load_corpus()
    by_source: dict[str, set[str]] = {}
    for e in excerpts:
        by_source.setdefault(e.provenance, set()).add(e.fold)
    assert all(len(folds) == 1 for folds in by_source.values())
    share = sum(e.fold == "test" for e in excerpts) / len(excerpts)
    assert 0.2 <= share <= 0.4


def test_the_report_never_lists_a_test_fold_miss() -> None:
    excerpts = load_corpus()
    result = evaluate(excerpts)
    test_ids = {e.id for e in excerpts if e.fold == "test"}
    assert not test_ids & {m["id"] for m in result["misses"]}
    assert not test_ids & (set(result["false_drains"]) | set(result["benign_actions"]))
    assert result["folds"]["test"]["n"] == len(test_ids)
