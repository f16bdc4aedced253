"""The latency figure's choice of run per fault class (benchmarks/plots.py, #33).

docs/img/latency.png must show each class from its n = 20 run where one exists, not the combined
run's n = 5, and say which file and commit each bar comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import plots


def run(commit: str, date: str, **classes: tuple[int, float]) -> dict[str, Any]:
    """A `latency` result with, per class, (n, detection p50)."""
    return {"commit": commit, "environment": {"date": date},
            "classes": {kind.replace("_", "-"): {"n": n, "handled": n, "detection_p50_s": detection}
                        for kind, (n, detection) in classes.items()}}


def test_a_class_rerun_at_n_20_replaces_the_combined_runs_n_5() -> None:
    chosen = plots.latency_per_class({
        "latency": run("82bf19b34205", "2026-12-03T22:10", crash=(20, 0.2), node_loss=(5, 6.6)),
        "latency-node-loss": run("38d8c644dff6", "2026-12-03T22:34", node_loss=(20, 6.5), crash=(0, 0.0)),
    })
    assert chosen["node-loss"].source == "latency-node-loss"
    assert chosen["node-loss"].row["detection_p50_s"] == 6.5
    assert chosen["crash"].source == "latency"
    assert "n = 20, 20 handled" in chosen["node-loss"].label(4) and "[4] 38d8c64" in chosen["node-loss"].label(4)


def test_the_newest_n_20_run_wins_and_a_class_never_run_at_20_keeps_its_largest() -> None:
    chosen = plots.latency_per_class({
        "latency": run("82bf19b34205", "2026-12-03T22:10", node_failure=(5, 206.0), straggler=(4, -229.0)),
        "latency-xid-node-failure": run("c775117eb8bc", "2026-12-04T01:31", node_failure=(20, 206.5)),
        "latency-node-failure-20": run("db3e955e7462", "2026-12-04T09:25", node_failure=(20, 237.7), hang=(0, 0.0)),
        "latency-straggler": run("38d8c644dff6+dirty", "2026-12-03T22:15", straggler=(10, 25.9)),
    })
    assert chosen["node-failure"].source == "latency-node-failure-20"
    assert chosen["straggler"].source == "latency-straggler"  # 10 beats 4, though neither is 20
    assert chosen["straggler"].commit == "38d8c64+dirty"
    assert set(chosen) == {"node-failure", "straggler"}  # no bars for a class no run had (hang: n = 0)


def test_the_figure_is_drawn_from_the_results_in_the_repository(tmp_path: Path) -> None:
    runs = {name: result for name in plots.LATENCY_RUNS if (result := plots._load(name)) is not None}
    chosen = plots.latency_per_class(runs)
    # Every class the combined run had at n = 5 has an n = 20 run of its own now (#33).
    assert {kind: run.n for kind, run in chosen.items()} == {kind: 20 for kind in plots.LATENCY_CLASSES}
    plots.latency(runs, tmp_path / "latency.png")
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
