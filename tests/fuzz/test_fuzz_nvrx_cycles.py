"""Hostile NVRx cycle-info files and comment tags: the parser returns a bounded CycleInfo or rejects
with CycleInfoError, and a tag never yields a relative path or one that climbs with `..`.

The files are written by the job's launcher into a directory the job's user owns, and the tag is
in the job's comment: both are the user's bytes. Examples start from a file ft_launcher 0.7.0
wrote and mutate its values (wrong types, huge numbers, control characters, nesting, junk).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.detect.nvrx_cycles import (
    MAX_FIELD_CHARS,
    MAX_NUMBER,
    CycleInfoError,
    cycle_file_key,
    cycles_dir_from_comment,
    parse_cycle_info,
)
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

WRITTEN: dict[str, Any] = {
    "job_id": "42", "attempt_index": 0, "cycle_number": 1, "cycle_start_time": "2026-12-01T13:23:08.412Z",
    "cycle_end_time": "", "cycle_log_file": "", "active_nodes": "node[1-2]", "standby_nodes": "",
    "generation": "0", "active_ranks": "0-1"}

values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
    | st.text(max_size=64) | st.sampled_from(["2026-12-01T13:23:08Z", "9" * 30, "node[1-\u202e2]", "\x00"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


@given(st.dictionaries(st.sampled_from(sorted(WRITTEN)), values, max_size=4), st.booleans())
def test_mutated_cycle_files(changes: dict[str, Any], drop: bool) -> None:
    document = {k: v for k, v in WRITTEN.items() if not (drop and k in changes)} if drop else {**WRITTEN, **changes}
    data = json.dumps(document, allow_nan=True).encode()
    info = rejects_cleanly("nvrx-cycle-info", lambda: parse_cycle_info(data), (CycleInfoError,))
    if info is not None:
        assert 0 <= info.cycle_number <= MAX_NUMBER and 0 <= info.generation <= MAX_NUMBER
        assert all(len(v) <= MAX_FIELD_CHARS and v.isprintable()
                   for v in (info.job_id, info.active_nodes, info.standby_nodes, info.active_ranks))


@given(st.binary(max_size=2048))
def test_arbitrary_bytes(data: bytes) -> None:
    rejects_cleanly("nvrx-cycle-info-bytes", lambda: parse_cycle_info(data), (CycleInfoError,))


@given(st.text(max_size=300), st.text(alphabet="0123456789.x-", max_size=30))
def test_comment_tags_and_file_names(comment: str, suffix: str) -> None:
    directory = rejects_cleanly("nvrx-cycles-tag", lambda: cycles_dir_from_comment(comment),
                                (CycleInfoError,))
    if directory is not None:
        assert directory.startswith("/") and ".." not in directory.split("/") and directory.isprintable()
    key = rejects_cleanly("nvrx-cycle-file-name", lambda: cycle_file_key("cycle_info.42." + suffix, "42"), ())
    assert key is None or f"cycle_info.42.{key[0]}.{key[1]}" == "cycle_info.42." + suffix
