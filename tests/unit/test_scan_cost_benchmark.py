"""The scan-cost benchmark grows the recorded answers to the asked size, every entry distinct, so
what it times is a cluster of that size (not the same few nodes parsed again)."""

from __future__ import annotations

import json

import pytest

from benchmarks import scan_cost


def test_the_grown_answers_hold_as_many_distinct_entries_as_asked(capsys: pytest.CaptureFixture[str]) -> None:
    scan_cost.run(["--nodes", "37", "--jobs", "53", "--dead", "5", "--rounds", "1", "--json"])
    scans = json.loads(capsys.readouterr().out.splitlines()[-1])["scans"]
    for version in ("22.05", "24.11"):
        assert scans[f"squeue --json, {version}"]["entries"] == 53
        assert scans[f"sinfo --json, {version}"]["entries"] == 37
    assert scans["sinfo --states=down,fail,no_respond (text)"]["entries"] == 5
