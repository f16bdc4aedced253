"""The shipper configs docs/log-push.md shows are the ones sites copy: they must not mislabel files.

A shipper takes each record's job id from the tailed file's path. Read from a shared directory
with a pattern anchored only at its end, any user's `slurm-x-slurm-<victim>.out` becomes the
victim's output. The documented Fluent Bit and Vector configs must tail only per-user directories,
take the job id with a pattern anchored at both ends over the whole path, and send the path along
(goodput checks it against Slurm's record of the job before it acts).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

from goodput.detect.push import PushFields

DOC = Path(__file__).resolve().parents[2] / "docs" / "log-push.md"
OWN = ["/shared/slurm/logs/alice/slurm-42.out", "/shared/slurm/logs/alice/slurm-42_7.out"]
NOT_A_JOBS_OWN = [
    "/shared/slurm/logs/mallory/slurm-x-slurm-42.out",  # another user's file named like job 42's
    "/shared/slurm/logs/slurm-42.out",                 # the shared, world-writable level itself
    "/shared/slurm/logs/alice/sub/slurm-42.out",
    "/shared/slurm/logs/alice/slurm-42.out.bak",
    "/shared/slurm/logs/alice/slurm-42.out\n",
    "/elsewhere/shared/slurm/logs/alice/slurm-42.out",
    "/shared/slurm/logs/mallory/x\n/shared/slurm/logs/alice/slurm-42.out",
]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def _ini_values(key: str) -> list[str]:
    return [m.group(1).strip() for block in _blocks("ini") for m in re.finditer(rf"^\s*{key}\s+(.+)$", block, re.M)]


def _vector() -> dict[str, object]:
    configs = [tomllib.loads(b) for b in _blocks("toml") if "[sources." in b]
    assert len(configs) == 1, "docs/log-push.md should show one Vector config"
    return configs[0]


def _job_id(pattern: str, path: str) -> str | None:
    match = re.search(pattern, path)  # search, as the shippers do: the anchors must do the work
    return match.group("job_id") if match else None


def _fluent_bit_regex() -> str:
    """Onigmo with Ruby syntax: `^` and `$` match at every line, so only `\\A` and `\\z` anchor the path."""
    (regex,) = _ini_values("Regex")
    assert regex.startswith("\\A") and regex.endswith("\\z"), regex
    return regex.replace("(?<", "(?P<").removesuffix("\\z") + "\\Z"  # in Python's spelling


def _vector_regex() -> str:
    """Rust's regex: without the `m` flag, `^` and `$` are the ends of the whole text."""
    transform = _vector()["transforms"]
    assert isinstance(transform, dict)
    (pattern,) = re.findall(r"parse_regex\([^,]+,\s*r'([^']*)'\)", transform["slurm_job"]["source"])
    assert pattern.startswith("^") and pattern.endswith("$") and "(?m" not in pattern, pattern
    return pattern.removesuffix("$") + "\\Z"


@pytest.mark.parametrize("regex", [_fluent_bit_regex, _vector_regex], ids=["fluent-bit", "vector"])
def test_the_job_id_pattern_is_anchored_at_both_ends_over_the_whole_path(regex: object) -> None:
    assert callable(regex)
    pattern = regex()
    assert [_job_id(pattern, p) for p in OWN] == ["42", "42_7"]
    assert {p: _job_id(pattern, p) for p in NOT_A_JOBS_OWN} == dict.fromkeys(NOT_A_JOBS_OWN)


def test_the_shippers_read_only_per_user_directories() -> None:
    vector = _vector()
    sources = vector["sources"]
    assert isinstance(sources, dict)
    globs = [*_ini_values("Path"), *sources["slurm"]["include"]]
    assert len(globs) == 2
    for glob in globs:
        assert all(fnmatch.fnmatchcase(p, glob) for p in OWN), glob
        assert not fnmatch.fnmatchcase("/shared/slurm/logs/slurm-42.out", glob), glob


def test_the_shippers_send_the_path_goodput_checks() -> None:
    (path_key,) = _ini_values("Path_Key")
    assert path_key in PushFields().file
    sources = _vector()["sources"]
    assert isinstance(sources, dict)
    assert sources["slurm"].get("file_key", "file") in PushFields().file  # Vector's file source adds `file`
