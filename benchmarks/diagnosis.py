"""`python -m benchmarks diagnosis [--json] [--misses] [--family F]`: judgement on real-world logs.

Runs the offline classifier (`goodput classify`, the same code the service uses on a job's log)
over every excerpt of the corpus in `benchmarks/corpus/diagnosis/` and compares each verdict with
the excerpt's human labels: category, drain, restart and the named culprit, per field, per family,
plus the two counts that must stay at zero (a drain the labels do not call for; any action on a
benign log). Hand-made fixtures under tests/ never count here. Labels are the corpus's; this
module only reads them, so a change to the classifier cannot quietly move the goalposts.
"""

from __future__ import annotations

import argparse
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

    @property
    def family(self) -> str:
        return self.id.split("-", 1)[0]


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


def evaluate(excerpts: Sequence[Excerpt], root: Path = CORPUS) -> dict[str, Any]:
    per_field: dict[str, int] = defaultdict(int)
    per_family: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    false_drains: list[str] = []
    benign_actions: list[str] = []
    misses: list[dict[str, Any]] = []
    for excerpt in excerpts:
        verdict = classify_file(str(root / excerpt.file))
        marks = score(excerpt, verdict)
        family = per_family[excerpt.family]
        family["n"] += 1
        for name, ok in marks.items():
            per_field[name] += ok
            family[name] += ok
        if verdict.drain and not excerpt.drain:
            false_drains.append(excerpt.id)
        if excerpt.benign and (verdict.drain or verdict.restart):
            benign_actions.append(excerpt.id)
        if not all(marks.values()):
            misses.append({"id": excerpt.id, "wrong": [k for k, ok in marks.items() if not ok],
                           "want": {"category": str(excerpt.category), "culprit_kind": str(excerpt.culprit_kind),
                                    "host": excerpt.culprit_host, "gpu": excerpt.culprit_gpu,
                                    "rank": excerpt.culprit_rank, "drain": excerpt.drain,
                                    "restart": excerpt.restart},
                           "got": {"category": str(verdict.category), "culprit_kind": str(verdict.culprit_kind),
                                   "culprit": verdict.culprit, "host": verdict.host, "gpu": verdict.gpu,
                                   "rank": verdict.rank, "drain": verdict.drain, "restart": verdict.restart,
                                   "signatures": list(verdict.signatures)}})
    n = len(excerpts)
    return {
        "benchmark": "diagnosis",
        # The classifier and the corpus decide the figures; new, uncommitted excerpts count as changes.
        "commit": commit("goodput", "benchmarks", untracked=True), "n": n,
        "sources": len({e.provenance for e in excerpts}), "benign": sum(e.benign for e in excerpts),
        "accuracy": {k: round(per_field[k] / n, 4) if n else None for k in FIELDS},
        "false_drains": false_drains, "benign_actions": benign_actions,
        "families": {name: {"n": f["n"], **{k: round(f[k] / f["n"], 4) for k in FIELDS}}
                     for name, f in sorted(per_family.items())},
        "misses": misses,
    }


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
        print(f"  false drains: {len(result['false_drains'])}  action on benign: {len(result['benign_actions'])}")
        for family, marks in result["families"].items():
            print(f"  {family:<9} n={marks['n']:<4} " + "  ".join(f"{k} {marks[k]:.0%}" for k in FIELDS))
        if args.misses:
            for miss in result["misses"]:
                print(json.dumps(miss, sort_keys=True))
    else:
        shown = result if args.misses else {k: v for k, v in result.items() if k != "misses"}
        print(json.dumps(shown, sort_keys=True))
