"""`python -m benchmarks diagnosis [--json] [--misses] [--family F]`: judgement on real-world logs.

Runs the offline classifier (`goodput classify`, the same code the service uses on a job's log)
over every excerpt of the corpus in `benchmarks/corpus/diagnosis/` and compares each verdict with
the excerpt's human labels: category, drain, restart and the named culprit, per field, per family,
plus the two counts that must stay at zero (a drain the labels do not call for; any action on a
benign log). Hand-made fixtures under tests/ never count here. Labels are the corpus's; this
module only reads them, so a change to the classifier cannot quietly move the goalposts.

The corpus is split by source into two folds with a fixed hash of the provenance (about 30 % test,
`fold_of`): every excerpt of one thread lands in the same fold, so no rule can be fitted to a thread
and then "tested" on it. Rules are written and tuned on the training fold only; the figure that
counts is the test fold's, and the gap between the two is reported per field and per confidence
level. Excerpts of batch 0 were all read while writing rules before the split, so the honest
figure is the test fold's over later batches ("unseen"), reported on its own. `--misses` lists
training-fold misses only: the test fold's wrong verdicts are never shown, so nobody can study
them into rules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks._git import commit
from goodput.diagnose.classify import classify_file
from goodput.diagnose.signatures.verdict import SOURCE_NODE, Verdict
from goodput.models import Category, CulpritKind

CORPUS = Path(__file__).parent / "corpus" / "diagnosis"
FIELDS = ("category", "drain", "restart", "culprit")
FOLDS = ("train", "test")
TEST_PERCENT = 30


def fold_of(provenance: str) -> Literal["train", "test"]:
    """The fold of a source, fixed forever by its provenance: never chosen, never moved by hand."""
    digest = hashlib.sha256(provenance.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 100 < TEST_PERCENT else "train"


class Excerpt(BaseModel):
    """One labelled excerpt of the manifest; unknown keys are a typo, refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z]+-\d{3}$")
    file: str
    provenance: str = Field(min_length=3)
    url: str = Field(pattern=r"^https://")
    source: Literal["issue", "logbook", "ci-log", "docs", "code", "run"]
    form: Literal["verbatim", "retyped"] = "retyped"
    category: Category
    benign: bool = False
    culprit_kind: CulpritKind
    culprit_host: str = ""
    culprit_gpu: str = ""
    culprit_rank: int | None = None
    source_node: bool = False
    drain: bool
    restart: bool
    why: str = Field(min_length=10)
    # 0: the excerpts the rules were written from before the corpus had folds (both folds seen);
    # 1 and later: gathered after the split, so their test-fold share was never seen by a rule writer.
    batch: int = Field(default=0, ge=0)

    @property
    def family(self) -> str:
        return self.id.split("-", 1)[0]

    @property
    def fold(self) -> Literal["train", "test"]:
        return fold_of(self.provenance)


def load_corpus(root: Path = CORPUS) -> list[Excerpt]:
    """Every excerpt of every manifest; raises ValueError on a duplicate id or a missing file."""
    excerpts: list[Excerpt] = []
    seen: set[str] = set()
    for manifest in sorted(root.glob("*.toml")):
        with manifest.open("rb") as stream:
            entries = tomllib.load(stream).get("excerpt", [])
        for entry in entries:
            excerpt = Excerpt.model_validate(entry)
            if excerpt.id in seen:
                raise ValueError(f"{manifest.name}: duplicate excerpt id {excerpt.id}")
            if not (root / excerpt.file).is_file():
                raise ValueError(f"{manifest.name}: {excerpt.id}: no file {excerpt.file}")
            seen.add(excerpt.id)
            excerpts.append(excerpt)
    return excerpts


def _pci(text: str) -> str:
    """`bus:device` of a PCI id, lower case: `0000:3B:00.0`, `3b:00` and `00000000:3B:00.0` agree."""
    parts = text.lower().split(".")[0].split(":")
    return ":".join(p.lstrip("0").rjust(2, "0") for p in parts[-2:])


def culprit_correct(label: Excerpt, verdict: Verdict) -> bool:
    """Whether the verdict names the culprit the labels name, as specifically as they do."""
    kind = label.culprit_kind
    if label.benign or kind is CulpritKind.UNKNOWN:
        return verdict.culprit is None or verdict.culprit_kind is CulpritKind.UNKNOWN
    if label.culprit_rank is not None and verdict.rank != label.culprit_rank:
        return False
    if label.culprit_host and verdict.host != label.culprit_host:
        return False
    if label.culprit_gpu and (verdict.gpu is None or _pci(verdict.gpu) != _pci(label.culprit_gpu)):
        return False
    if kind in (CulpritKind.GPU, CulpritKind.NODE):
        if label.source_node and not label.culprit_host:
            return verdict.culprit == SOURCE_NODE or (
                verdict.culprit_kind in (CulpritKind.GPU, CulpritKind.NODE) and verdict.drain)
        return verdict.culprit_kind in (CulpritKind.GPU, CulpritKind.NODE)
    return verdict.culprit_kind is kind


def score(label: Excerpt, verdict: Verdict) -> dict[str, bool]:
    return {"category": verdict.category is label.category, "drain": verdict.drain == label.drain,
            "restart": verdict.restart == label.restart, "culprit": culprit_correct(label, verdict)}


class _Tally:
    """Right answers per field over some excerpts, and how many verdicts were fully right."""

    def __init__(self) -> None:
        self.n = 0
        self.fields: dict[str, int] = defaultdict(int)
        self.all_right = 0

    def add(self, marks: dict[str, bool]) -> None:
        self.n += 1
        for name, ok in marks.items():
            self.fields[name] += ok
        self.all_right += all(marks.values())

    def summary(self) -> dict[str, Any]:
        if not self.n:
            return {"n": 0}
        return {"n": self.n, **{k: round(self.fields[k] / self.n, 4) for k in FIELDS},
                "all_fields": round(self.all_right / self.n, 4)}


def _gap(train: dict[str, Any], test: dict[str, Any]) -> dict[str, float | None]:
    """Training minus test, in points, per field: how much of the training figure is fitting."""
    return {k: round(100 * (train[k] - test[k]), 1) if train.get("n") and test.get("n") else None
            for k in (*FIELDS, "all_fields")}


def _miss(excerpt: Excerpt, verdict: Verdict, marks: dict[str, bool]) -> dict[str, Any]:
    return {"id": excerpt.id, "wrong": [k for k, ok in marks.items() if not ok],
            "want": {"category": str(excerpt.category), "culprit_kind": str(excerpt.culprit_kind),
                     "host": excerpt.culprit_host, "gpu": excerpt.culprit_gpu,
                     "rank": excerpt.culprit_rank, "drain": excerpt.drain, "restart": excerpt.restart},
            "got": {"category": str(verdict.category), "culprit_kind": str(verdict.culprit_kind),
                    "culprit": verdict.culprit, "host": verdict.host, "gpu": verdict.gpu,
                    "rank": verdict.rank, "drain": verdict.drain, "restart": verdict.restart,
                    "confidence": str(verdict.confidence), "signatures": list(verdict.signatures)}}


def evaluate(excerpts: Sequence[Excerpt], root: Path = CORPUS) -> dict[str, Any]:
    overall = _Tally()
    per_family: dict[str, _Tally] = defaultdict(_Tally)
    per_fold: dict[str, _Tally] = defaultdict(_Tally)
    unseen = _Tally()
    unseen_by_batch: dict[int, _Tally] = defaultdict(_Tally)
    per_confidence: dict[str, dict[str, _Tally]] = {fold: defaultdict(_Tally) for fold in FOLDS}
    false_drains: dict[str, list[str]] = {fold: [] for fold in FOLDS}
    benign_actions: dict[str, list[str]] = {fold: [] for fold in FOLDS}
    misses: list[dict[str, Any]] = []
    for excerpt in excerpts:
        verdict = classify_file(str(root / excerpt.file))
        marks = score(excerpt, verdict)
        fold = excerpt.fold
        for tally in (overall, per_family[excerpt.family], per_fold[fold],
                      per_confidence[fold][str(verdict.confidence)]):
            tally.add(marks)
        if fold == "test" and excerpt.batch > 0:
            unseen.add(marks)
            unseen_by_batch[excerpt.batch].add(marks)
        if verdict.drain and not excerpt.drain:
            false_drains[fold].append(excerpt.id)
        if excerpt.benign and (verdict.drain or verdict.restart):
            benign_actions[fold].append(excerpt.id)
        if fold == "train" and not all(marks.values()):
            misses.append(_miss(excerpt, verdict, marks))
    folds = {fold: {**per_fold[fold].summary(),
                    "sources": len({e.provenance for e in excerpts if e.fold == fold}),
                    "false_drains": len(false_drains[fold]), "benign_actions": len(benign_actions[fold]),
                    "confidence": {level: per_confidence[fold][level].summary()
                                   for level in ("high", "medium", "low") if level in per_confidence[fold]}}
             for fold in FOLDS}
    n = len(excerpts)
    return {
        "benchmark": "diagnosis",
        # The classifier and the corpus decide the figures; new, uncommitted excerpts count as changes.
        "commit": commit("goodput", "benchmarks", untracked=True), "n": n,
        "sources": len({e.provenance for e in excerpts}), "benign": sum(e.benign for e in excerpts),
        "accuracy": {k: v for k, v in overall.summary().items() if k in FIELDS} if n
        else dict.fromkeys(FIELDS),
        "folds": folds, "gap": _gap(folds["train"], folds["test"]),
        "test_unseen": unseen.summary(),
        # Each later batch's test share on its own: the newest one is the least studied.
        "test_unseen_by_batch": {str(b): unseen_by_batch[b].summary() for b in sorted(unseen_by_batch)},
        "gap_by_confidence": {level: _gap(folds["train"]["confidence"].get(level, {}),
                                          folds["test"]["confidence"].get(level, {}))
                              for level in ("high", "medium", "low")},
        # Ids are named for the training fold only; the test fold's are counted, never listed.
        "false_drains": false_drains["train"], "benign_actions": benign_actions["train"],
        "families": {name: {k: v for k, v in tally.summary().items() if k != "all_fields"}
                     for name, tally in sorted(per_family.items())},
        "misses": misses,
    }


def _print_fold(name: str, fold: dict[str, Any]) -> None:
    if not fold.get("n"):
        print(f"  {name:<5} no excerpts")
        return
    print(f"  {name:<5} n={fold['n']:<4} sources={fold['sources']:<4} "
          + "  ".join(f"{k} {fold[k]:.1%}" for k in FIELDS)
          + f"  false drains {fold['false_drains']}  action on benign {fold['benign_actions']}")
    for level, marks in fold["confidence"].items():
        print(f"        {level:<6} n={marks['n']:<4} all fields right {marks['all_fields']:.1%}  "
              + "  ".join(f"{k} {marks[k]:.0%}" for k in FIELDS))


def run(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks diagnosis")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    parser.add_argument("--misses", action="store_true", help="list every excerpt judged wrongly")
    parser.add_argument("--family", action="append", default=[], help="only these families")
    parser.add_argument("--out", help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    excerpts = [e for e in load_corpus() if not args.family or e.family in args.family]
    result = evaluate(excerpts)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if not args.json:
        print(f"diagnosis corpus: {result['n']} excerpts from {result['sources']} sources "
              f"({result['benign']} benign), commit {result['commit']}")
        for name in FIELDS:
            value = result["accuracy"][name]
            print(f"  {name:<9} {value:.1%}" if value is not None else f"  {name:<9} -")
        for fold in FOLDS:
            _print_fold(fold, result["folds"][fold])
        unseen = result["test_unseen"]
        if unseen["n"]:
            print(f"  test fold, batches gathered after the split (never seen): n={unseen['n']}  "
                  + "  ".join(f"{k} {unseen[k]:.1%}" for k in FIELDS))
            for batch, marks in result["test_unseen_by_batch"].items():
                print(f"        batch {batch:<3} n={marks['n']:<4} "
                      + "  ".join(f"{k} {marks[k]:.1%}" for k in FIELDS))
        gap = result["gap"]
        print("  gap (train - test, points): " + "  ".join(
            f"{k} {gap[k]:+.1f}" if gap[k] is not None else f"{k} -" for k in (*FIELDS, "all_fields")))
        for family, marks in result["families"].items():
            print(f"  {family:<9} n={marks['n']:<4} " + "  ".join(f"{k} {marks[k]:.0%}" for k in FIELDS))
        if args.misses:  # the training fold's only
            for miss in result["misses"]:
                print(json.dumps(miss, sort_keys=True))
    else:
        shown = result if args.misses else {k: v for k, v in result.items() if k != "misses"}
        print(json.dumps(shown, sort_keys=True))
