"""Hostile checkpoint trees, job comments and metadata files: discovery returns, parsers reject cleanly.

A job's owner controls its checkpoint tree and its comment. The tree target builds small trees
on the real filesystem (directories and files with each layout's names and random, often huge,
numbers; pointer files with hostile text; JSON nested deep; FIFOs; symlinks inside, out of the
root, climbing, dangling; names that are not UTF-8) and runs discovery configured for each layout
and auto-detected: it must return, with every refusal a problem, and never show a byte of the
file outside the root. The other targets run the comment parser and each metadata parser alone.
Trees live in one scratch directory per test, emptied after each example.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.checkpoints import (
    LAYOUTS,
    CheckpointCommentError,
    CheckpointConfig,
    LocalFileSystem,
    ScanLimits,
    config_from_comment,
    find_resume_point,
    to_comment,
)
from goodput.checkpoints.fs import RefusedError, within_root
from goodput.checkpoints.generic import compile_glob, compile_step_regex
from goodput.checkpoints.metadata import (
    MetadataError,
    parse_deepspeed_latest,
    parse_megatron_tracker,
    parse_trainer_state,
    parse_weight_map,
)
from goodput.checkpoints.scan import step_from_name
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

NOW = datetime.now(UTC) + timedelta(hours=1)
OUTSIDE_SECRET = "OUTSIDE-SECRET-7f3a"

# Numbers as a hostile tree carries them: small, plausible, huge, and too long for any int64.
numbers = st.one_of(st.integers(0, 12), st.sampled_from([100, 500, 99999, 99999999, 10**18 - 1, 10**18, 2**63, 2**64,
                                                         10**39 + 7]), st.integers(0, 10**40))
number_text = st.one_of(numbers.map(str), st.sampled_from(["²", "١٢٣", "-1", "+5", "0x10", "1e3", " 7 ", "9" * 300]))

NAME_TEMPLATES = [
    "iter_{a:07d}", "iter_{a}", "global_step{a}", "checkpoint-{a}", "tmp-checkpoint-{a}", "step-{a}", "step-{a}.tmp",
    "checkpoint_{a}", "ckpt_{a}", "model--step={a}-x", "model--step={a}-x-unfinished", "run{a}.ckpt",
    "mp_rank_{a:02d}", "mp_rank_{a:02d}_{b:03d}", "__{a}_{b}.distcp", "mp_rank_{a:02d}_model_states.pt",
    "bf16_zero_pp_rank_{a}_mp_rank_{b:02d}_optim_states.pt", "model-{a:05d}-of-{b:05d}.safetensors",
    "pytorch_model_fsdp_{a}", "model_optim_rng.pt",
]
FIXED_NAMES = [".metadata", "common.pt", "metadata.json", "model.safetensors", "pytorch_model.bin",
               "model.safetensors.index.json", "trainer_state.json", "optimizer.pt", "latest",
               "latest_checkpointed_iteration.txt", "weights", "checkpoint", ".complete", "release"]

names = st.one_of(
    st.builds(lambda template, a, b: template.format(a=a, b=b), st.sampled_from(NAME_TEMPLATES), numbers, numbers),
    st.sampled_from(FIXED_NAMES),
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12)
    .map(lambda n: "x" + n),
)
raw_names = st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b
                                                      and b not in {b".", b".."})


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _trainer_state(step: str) -> str:
    return '{"global_step": ' + step + ', "log_history": []}'


def _index(shards: list[str]) -> str:
    return json.dumps({"weight_map": {f"w{i}": s for i, s in enumerate(shards)}})


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                      max_size=4), max_leaves=12)
json_text = st.one_of(
    json_values.map(json.dumps),
    number_text.map(_trainer_state),
    st.lists(names, max_size=4).map(_index),
    st.integers(0, 200_000).map(nested),
    st.integers(0, 100_000).map(lambda n: "{" * n),
    st.integers(0, 5000).map(lambda n: '{"global_step": ' + "9" * n + "}"),
    st.sampled_from(['{"weight_map": {"a": ["x"]}}', '{"weight_map": {"a": {}}}', '{"global_step": true}',
                     '"\\ud800"', "NaN", "[1e999999]", '{"a":"\\"]]]]"}']),
    st.text(max_size=40),
)
pointer_text = st.one_of(number_text, st.sampled_from(["release", "", "\n", "global_step5", "../..", ".", "x/y",
                                                       "global_step5\x1b[2J", "global_step\u00b2"]),
                         names, st.text(max_size=30))
# File contents in trees: prebuilt hostile documents (cheap to draw) beside drawn pointer text.
HOSTILE_CONTENTS = [
    b"", b"release", b"5\n", "²".encode(), b"9" * 5000, b"global_step5", b"../../etc/shadow", b"\xff\xfe\x00",
    nested(100_000).encode(), b"{" * 100_000, _trainer_state("5").encode(), _trainer_state("9" * 5000).encode(),
    _trainer_state("true").encode(), _index(["model-00001-of-99999999999.safetensors"]).encode(),
    _index(["__0_0.distcp", "../x"]).encode(), b'{"weight_map": {"a": ["x"]}}', b'{"sharded_backend": "torch_dist"}',
]
contents = st.one_of(st.sampled_from(HOSTILE_CONTENTS), st.binary(max_size=16), pointer_text.map(str.encode))

# One entry of the tree: where (1..3 components) and what.
KINDS = ["dir", "file", "file", "file", "fifo", "link-in", "link-out", "link-up", "link-dangling", "link-loop"]
entries = st.tuples(st.lists(st.one_of(names, raw_names), min_size=1, max_size=3), st.sampled_from(KINDS), contents,
                    st.integers(0, 50))
trees = st.lists(entries, max_size=8)
Tree = list[tuple[list[str | bytes], str, bytes, int]]
layouts = st.sampled_from([None, *LAYOUTS])
generic_rules = st.tuples(st.sampled_from(["*", "ckpt_*", "*.pt", "[!x]*", "step-?", "[z-a]"]),
                          st.sampled_from([r"(\d+)", "(x)?", "(a+)+$", "[0-9]+", "(.+)", r"(a)\1", "_(.*)"]))


def _parent_ready(base: bytes, parts: list[bytes]) -> bool:
    """Creates the parent directories of an entry without following a link the tree already holds
    (which could lead out of the scratch directory); False when a component is not a directory."""
    path = base
    for part in parts[:-1]:
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except FileNotFoundError:
            os.mkdir(path)
    return True


def build(root: Path, outside: Path, tree: Tree) -> None:
    base = os.fsencode(root)
    made: list[bytes] = []
    for raw_parts, kind, data, pick in tree:
        parts = [p if isinstance(p, bytes) else os.fsencode(p) for p in raw_parts]
        path = os.path.join(base, *parts)
        try:
            if not _parent_ready(base, parts) or os.path.lexists(path):
                continue
            if kind == "dir":
                os.mkdir(path)
            elif kind == "file":
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "link-in" and made:
                os.symlink(os.path.relpath(made[pick % len(made)], os.path.dirname(path)), path)
            elif kind == "link-out":
                os.symlink(os.fsencode(outside / ("secret" if pick % 2 else "dir")), path)
            elif kind == "link-up":
                os.symlink(b"../" * (1 + pick % 4), path)
            elif kind == "link-dangling":
                os.symlink(b"nowhere", path)
            elif kind == "link-loop":
                os.symlink(os.path.basename(path), path)
            made.append(path)
        except OSError:
            continue  # a name too long for the filesystem: a tree can only be so hostile


def _files(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def well_formed(root: Path, layout: str, step: int) -> None:
    """A complete checkpoint of `layout` at `step`, which the hostile entries then damage."""
    shard = b"x" * 8
    dcp = {".metadata": shard, "__0_0.distcp": shard, "__1_0.distcp": shard}
    if layout == "megatron":
        _files(root, {f"iter_{step:07d}/mp_rank_00/model_optim_rng.pt": shard,
                      "latest_checkpointed_iteration.txt": str(step).encode()})
    elif layout == "deepspeed":
        _files(root, {f"global_step{step}/mp_rank_00_model_states.pt": shard,
                      f"global_step{step}/zero_pp_rank_0_mp_rank_00_optim_states.pt": shard,
                      "latest": f"global_step{step}".encode()})
    elif layout == "hf":
        _files(root, {f"checkpoint-{step}/model.safetensors": shard,
                      f"checkpoint-{step}/trainer_state.json": _trainer_state(str(step)).encode()})
    elif layout in ("dcp", "torchtitan", "nemo"):
        where = {"dcp": f"step-{step}", "torchtitan": f"checkpoint/step-{step}", "nemo": f"m--step={step}-x/weights"}
        _files(root, {f"{where[layout]}/{name}": data for name, data in dcp.items()})
    elif layout == "generic":
        _files(root, {f"ckpt_{step}/model.bin": shard, f"ckpt_{step}/.complete": b""})


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    # tmpfs when there is one: creating and removing thousands of small trees on a disk-backed
    # filesystem costs more than discovering them.
    base = Path(tempfile.mkdtemp(prefix="goodput-fuzz-ckpt-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    outside = base / "outside"
    (outside / "dir" / "global_step1").mkdir(parents=True)
    (outside / "dir" / "global_step1" / "mp_rank_00_model_states.pt").write_text(OUTSIDE_SECRET)
    (outside / "secret").write_text(OUTSIDE_SECRET)
    try:
        yield base
    finally:
        shutil.rmtree(base)


@given(seed=st.tuples(layouts, numbers), tree=trees, layout=layouts, rule=generic_rules, tight=st.booleans())
def test_checkpoint_tree(scratch: Path, seed: tuple[str | None, int], tree: Tree, layout: str | None,
                         rule: tuple[str, str], tight: bool) -> None:
    root = Path(tempfile.mkdtemp(dir=scratch))
    try:
        if seed[0] is not None and seed[1] < 10**18:
            well_formed(root, seed[0], seed[1])
        build(root, scratch / "outside", tree)
        limits = ScanLimits(max_entries_per_dir=6, max_entries_total=60) if tight else ScanLimits()
        config = CheckpointConfig(root=str(root), layout=layout, pattern=rule[0], step_regex=rule[1], settle_s=0)
        result = rejects_cleanly("checkpoint-tree", lambda: find_resume_point(LocalFileSystem(limits=limits), config,
                                                                              NOW), ())
        assert result is not None
        found, choice = result
        type(found).model_validate_json(found.model_dump_json())
        type(choice).model_validate_json(choice.model_dump_json())
        assert OUTSIDE_SECRET not in choice.explanation
        for checkpoint in found.checkpoints:
            assert within_root(checkpoint.path, str(root)) and checkpoint.complete == (not checkpoint.problems)
        if choice.checkpoint is not None:
            assert choice.checkpoint.complete
    finally:
        shutil.rmtree(root)


VALID_COMMENTS = [
    "goodput:opt-in goodput:ckpt=megatron:/lustre/run7/ckpt",
    "goodput:ckpt=auto:/scratch/x/ goodput:ckpt-settle=30",
    "goodput:ckpt=generic:/ckpt goodput:ckpt-pattern=model-*.pt goodput:ckpt-step-regex=-s(\\d+) goodput:ckpt-marker=",
    "goodput:ckpt=hf:/data/out goodput:ckpt-marker=.done",
]
OPTIONS = ["", "-pattern", "-step-regex", "-marker", "-settle", "-colour", "-", "-Step"]
values = st.one_of(st.text(max_size=30), number_text, st.sampled_from(
    ["dcp:/x", "auto:/", "generic:/a/../b", "dcp:/x,y", "dcp:relative", "(a+)+$", "(x)?", "(a)\\1", "(?=a)",
     "[z-a]", "[!", "../../etc/shadow", "inf", "nan", "1e999", "-0", "9" * 5000, "x" * 300]))
tokens = st.builds(lambda option, value: f"goodput:ckpt{option}={value}", st.sampled_from(OPTIONS), values)


@st.composite
def mutated_comments(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID_COMMENTS))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.one_of(st.text(max_size=6), st.sampled_from([" ", ":", "/", "=", "..", ",", "\x00", "²"])))
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + len(piece):]
        else:
            text = text[:at] + piece + text[at + len(piece) or at + 1:]
    return text


comments = st.one_of(st.text(max_size=80), mutated_comments(), st.lists(tokens, max_size=5).map(" ".join),
                     st.tuples(st.sampled_from(VALID_COMMENTS), st.lists(tokens, max_size=3))
                     .map(lambda pair: " ".join([pair[0], *pair[1]])))


@given(comments)
def test_job_comment(comment: str) -> None:
    config = rejects_cleanly("checkpoint-comment", lambda: config_from_comment(comment), (CheckpointCommentError,))
    if config is None:
        return
    again = config_from_comment(to_comment(config))
    assert again is not None and (again.root, again.layout, again.settle_s) == (config.root, config.layout,
                                                                                 config.settle_s)
    if config.layout == "generic":
        assert again == config


@given(pointer_text)
def test_megatron_tracker(text: str) -> None:
    tracker = rejects_cleanly("checkpoint-megatron-tracker", lambda: parse_megatron_tracker(text), (MetadataError,))
    assert tracker is None or 0 <= tracker.iteration < 10**18


@given(pointer_text)
def test_deepspeed_latest(text: str) -> None:
    tag = rejects_cleanly("checkpoint-deepspeed-latest", lambda: parse_deepspeed_latest(text), (MetadataError,))
    assert tag is None or ("/" not in tag and tag.isprintable() and tag not in {".", ".."})


@given(json_text)
def test_trainer_state(text: str) -> None:
    step = rejects_cleanly("checkpoint-trainer-state", lambda: parse_trainer_state(text), (MetadataError,))
    assert step is None or 0 <= step < 10**18


@given(json_text)
def test_index_json(text: str) -> None:
    shards = rejects_cleanly("checkpoint-index-json", lambda: parse_weight_map(text), (MetadataError,))
    assert shards is None or all(isinstance(s, str) and s for s in shards)


@given(st.one_of(names, st.text(max_size=60)))
def test_step_from_name(name: str) -> None:
    step = rejects_cleanly("checkpoint-step-name", lambda: step_from_name(name), ())
    assert step is None or 0 <= step < 10**18


@given(st.one_of(values, st.text(max_size=40)))
def test_glob_and_step_regex(pattern: str) -> None:
    rejects_cleanly("checkpoint-glob", lambda: compile_glob(pattern), (RefusedError,))
    rejects_cleanly("checkpoint-step-regex", lambda: compile_step_regex(pattern), (RefusedError,))
