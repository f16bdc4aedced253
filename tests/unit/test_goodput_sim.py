"""Properties of the goodput discrete-event simulation (benchmarks/goodput_sim.py): bounds, the
zero-failure limit, monotonicity under common random numbers, the analytic cross-check, the CLI,
and goodput's latencies per failure class (benchmarks/_sim_classes.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import goodput_sim
from benchmarks._sim_classes import CLASSES, COMPONENT_CLASS, LatencyFileError, read_latency_file
from benchmarks._sim_levers import LEVERS, evaluate_levers
from benchmarks._sim_model import (
    LLAMA3_INTERRUPTIONS,
    LLAMA3_UNEXPECTED,
    MODELS,
    PHASES,
    Failure,
    Response,
    SimParams,
    analytic_ettr,
    class_shares,
    draw_failures,
    queue_draws,
    replication_seed,
    seconds_to_on_hours,
    simulate,
)
from goodput.checkpoints.advice import daly_interval_s

REPO = Path(__file__).resolve().parents[2]
SHORT = SimParams(days=14)
FIXTURE = REPO / "tests" / "fixtures" / "latency-classes.json"
# tests/fixtures/latency-classes.json, as the model takes it (app-error: no action, a person acts).
FIXTURE_LATENCY = (("xid-kernel-log", 2.9, 1.2), ("crash", 1.1, 0.8), ("hang", 302.0, 0.9),
                   ("node-failure", 25.0, 1.0), ("app-error", 1.0, None))


def _histories(p: SimParams, reps: int, seed: int = 3) -> list[list[Failure]]:
    return [draw_failures(p, random.Random(replication_seed(seed, r))) for r in range(reps)]


def _ettr(p: SimParams, history: list[Failure], model: str) -> float:
    return simulate(history, p, model)["productive"] / p.horizon_s


def test_llama3_table_sums_to_the_419_unexpected_interruptions() -> None:
    assert sum(c[2] for c in LLAMA3_INTERRUPTIONS) == LLAMA3_UNEXPECTED


@pytest.mark.parametrize(
    ("p", "strict"),
    [
        (SHORT, True),
        (dataclasses.replace(SHORT, spares=0), True),
        (dataclasses.replace(SHORT, gpus=131072), True),
        # MTTF 23 min < a 2-hour interval: checkpoints rarely complete, ETTR may reach exactly 0.
        (dataclasses.replace(SHORT, gpus=131072, ckpt_interval_min=120), False),
    ],
)
def test_ettr_is_in_zero_one_and_phases_add_up_to_the_horizon(p: SimParams, strict: bool) -> None:
    for h in _histories(p, 3):
        for m in MODELS:
            out = simulate(h, p, m)
            ettr = out["productive"] / p.horizon_s
            assert (0.0 < ettr <= 1.0) if strict else (0.0 <= ettr <= 1.0)
            assert sum(out[ph] for ph in PHASES) == pytest.approx(p.horizon_s, rel=1e-9)


def test_zero_failures_leaves_only_checkpoint_overhead() -> None:
    p = dataclasses.replace(SHORT, failure_rate=0.0)
    assert draw_failures(p, random.Random(1)) == []
    expected = p.ckpt_interval_min * 60 / (p.ckpt_interval_min * 60 + p.ckpt_save_s)
    for m in MODELS:
        assert _ettr(p, [], m) == pytest.approx(expected, abs=p.ckpt_interval_min * 60 / p.horizon_s)
    free = dataclasses.replace(p, ckpt_save_s=0.0)
    assert _ettr(free, [], "goodput") == pytest.approx(1.0)


@pytest.mark.parametrize("spares", [None, 0, 4])
@pytest.mark.parametrize("interval", [5.0, 30.0, 120.0])
def test_faster_response_never_lowers_ettr_on_the_same_failures(spares: int | None, interval: float) -> None:
    p = dataclasses.replace(SHORT, spares=spares, ckpt_interval_min=interval)
    slower_goodput = dataclasses.replace(p, detection_s=30.0, action_s=45.0)
    for h in _histories(p, 6):
        manual, seed, fast = (_ettr(p, h, m) for m in MODELS)
        assert manual <= seed <= fast
        assert _ettr(slower_goodput, h, "goodput") <= fast


def test_more_frequent_failures_lower_ettr() -> None:
    rates = [SHORT.failure_rate * k for k in (0.5, 1.0, 2.0)]
    for m in MODELS:
        means = []
        for rate in rates:
            p = dataclasses.replace(SHORT, failure_rate=rate)
            hs = _histories(p, 5)
            means.append(sum(_ettr(p, h, m) for h in hs) / len(hs))
        assert means[0] > means[1] > means[2], (m, means)


def test_automated_models_match_the_renewal_reward_estimate() -> None:
    p = dataclasses.replace(SimParams(days=54), spares=10_000)  # no spare waits, as the formula assumes
    hs = _histories(p, 8)
    for m in ("seed", "goodput"):
        sim = sum(_ettr(p, h, m) for h in hs) / len(hs)
        assert sim == pytest.approx(analytic_ettr(p, m), abs=0.006)


def test_people_are_slower_off_hours() -> None:
    p = SimParams()  # the run starts Monday 09:00
    assert seconds_to_on_hours(0.0, p) == 0.0
    assert seconds_to_on_hours(11 * 3600.0, p) == pytest.approx(12 * 3600.0)  # Monday 20:00 -> Tue 08:00
    friday_21h = 4 * 86400.0 + 12 * 3600.0
    assert seconds_to_on_hours(friday_21h, p) == pytest.approx(59 * 3600.0)  # -> Monday 08:00


def test_same_seed_same_result_and_json_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--json", "--reps", "2", "--days", "7", "--sweep-min", "15,60", "--seed", "5"]
    first = goodput_sim.run(argv)
    out = capsys.readouterr().out.strip().splitlines()
    data = json.loads(out[-1])
    for key in (
        "ettr_manual",
        "ettr_seed",
        "ettr_goodput",
        "gpu_hours_lost_manual",
        "gpu_hours_lost_seed",
        "gpu_hours_lost_goodput",
        "params",
        "sweep",
    ):
        assert key in data
    assert 0 < data["ettr_manual"] <= data["ettr_seed"] <= data["ettr_goodput"] <= 1
    assert data["ettr_gain_goodput_vs_seed"] >= 0
    assert [row["ckpt_interval_min"] for row in data["sweep"]] == [15, 60]
    assert data["params"]["seed"] == 5 and data["params"]["days"] == 7
    again = goodput_sim.run(argv)
    capsys.readouterr()
    assert again["models"] == first["models"]


def test_module_entry_point_prints_json_last() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.goodput_sim", "--json", "--reps", "1", "--days", "2", "--sweep-min", ""],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"ettr_manual", "ettr_seed", "ettr_goodput"} <= data.keys()


def test_plots_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = goodput_sim.run(["--plots", "--plot-dir", str(tmp_path), "--reps", "1", "--days", "3", "--sweep-min", "10,30"])
    capsys.readouterr()
    for name in ("goodput-ettr.png", "goodput-lost-time.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert len(r["plots"]) == 2


# -- the levers beyond detection (benchmarks/_sim_levers.py) --------------------------------------------

def test_a_queue_wait_costs_time_and_a_hot_spare_pool_takes_it_away() -> None:
    shared = dataclasses.replace(SHORT, queue_wait_min=30.0)
    for seed, history in enumerate(_histories(SHORT, 3)):
        waits = queue_draws(seed, len(history))
        queued = simulate(history, shared, "goodput", waits)
        assert queued["queue_wait"] > 0
        assert sum(queued[ph] for ph in PHASES) == pytest.approx(shared.horizon_s, rel=1e-9)
        pooled = simulate(history, dataclasses.replace(shared, hot_spares=True), "goodput", waits)
        assert pooled["queue_wait"] == 0
        assert pooled == simulate(history, SHORT, "goodput")  # the pool is exactly "no queue wait"
        assert pooled["productive"] >= queued["productive"]


def test_each_lever_is_measured_on_the_same_failures() -> None:
    seeds = [replication_seed(3, r) for r in range(4)]
    histories = [draw_failures(SHORT, random.Random(s)) for s in seeds]
    levers = evaluate_levers(SHORT, histories, seeds, queue_wait_min=30.0)
    rows = {row["lever"]: row for row in levers["rows"]}
    assert list(rows) == list(LEVERS)
    assert rows["as configured"]["gain"] == 0 and rows["as configured"]["ckpt_interval_min"] == 30.0
    # Daly's interval is what `goodput advise` computes from the same save cost and MTTF.
    assert levers["daly_interval_min"] == pytest.approx(daly_interval_s(30.0, SHORT.mttf_h * 3600) / 60)
    assert rows["checkpoint interval"]["ckpt_interval_min"] == pytest.approx(levers["daly_interval_min"])
    assert rows["hot-spare pool"]["gain"] > 0 and rows["checkpoint interval"]["gain"] > 0
    assert rows["both"]["gain"] > max(rows["hot-spare pool"]["gain"], rows["checkpoint interval"]["gain"])


def test_the_queue_waits_leave_every_other_result_as_it_was() -> None:
    """The levers draw their queue waits from a stream of their own: the main comparison (queue wait 0)
    replays exactly the failures and latencies it did before the levers existed."""
    history = _histories(SHORT, 1)[0]
    assert simulate(history, SHORT, "goodput") == simulate(history, SHORT, "goodput", queue_draws(1, len(history)))


# -- goodput's latencies per failure class (benchmarks/_sim_classes.py) -------------------------------

def _with_hang(latency: tuple[tuple[str, float, float | None], ...], hang_s: float) -> tuple[
        tuple[str, float, float | None], ...]:
    return tuple((c, hang_s if c == "hang" else d, a) for c, d, a in latency)


def test_every_llama3_component_has_one_of_the_five_classes() -> None:
    assert set(COMPONENT_CLASS) == {c[0] for c in LLAMA3_INTERRUPTIONS}
    assert set(COMPONENT_CLASS.values()) == set(CLASSES)  # and every class stands for something
    assert COMPONENT_CLASS["Faulty GPU"] == "xid-kernel-log" and COMPONENT_CLASS["Power Supply"] == "node-failure"
    assert COMPONENT_CLASS["NCCL Watchdog Timeouts"] == "crash" and COMPONENT_CLASS["Software Bug"] == "app-error"
    shares = class_shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["hang"] == pytest.approx((35 + 7) / 419)  # network switch/cable and NIC


def test_a_class_latency_costs_time_only_on_the_failures_of_that_class() -> None:
    # One failure of every component, an hour apart, sigma 0: every latency is exactly its median.
    history = [Failure(uptime_s=3600.0, component=c[0], needs_spare=c[3], z_detect=0.3, z_action=-0.2,
                       z_restart=0.1, repair_s=86400.0) for c in LLAMA3_INTERRUPTIONS]
    p = dataclasses.replace(SimParams(days=30), auto_sigma=0.0, class_latency=FIXTURE_LATENCY)
    slow = dataclasses.replace(p, class_latency=_with_hang(FIXTURE_LATENCY, 10_000.0))
    base, hung = simulate(history, p, "goodput"), simulate(history, slow, "goodput")
    medians = {c: d for c, d, _ in FIXTURE_LATENCY}
    assert base["detection"] == pytest.approx(sum(medians[COMPONENT_CLASS[f.component]] for f in history))
    n_hang = sum(COMPONENT_CLASS[f.component] == "hang" for f in history)
    assert n_hang == 2
    assert hung["detection"] - base["detection"] == pytest.approx(n_hang * (10_000.0 - 302.0))
    for phase in ("action", "requeue", "restart", "spare_wait"):
        assert hung[phase] == pytest.approx(base[phase]), phase


def test_a_class_no_component_maps_to_has_no_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    p = dataclasses.replace(SHORT, class_latency=FIXTURE_LATENCY)
    slow = dataclasses.replace(p, class_latency=_with_hang(FIXTURE_LATENCY, 5_000.0))
    history = _histories(SHORT, 1)[0]
    assert simulate(history, slow, "goodput")["detection"] > simulate(history, p, "goodput")["detection"]
    for component, cls in COMPONENT_CLASS.items():
        if cls == "hang":
            monkeypatch.setitem(COMPONENT_CLASS, component, "crash")
    assert simulate(history, slow, "goodput") == simulate(history, p, "goodput")


def test_an_app_error_is_left_to_a_person_by_every_model() -> None:
    def failure(component: str) -> Failure:
        return Failure(uptime_s=1.0, component=component, needs_spare=False, z_detect=0.4, z_action=0.7,
                       z_restart=0.0, repair_s=1.0)

    per_class = dataclasses.replace(SHORT, class_latency=FIXTURE_LATENCY)
    bug, gpu = failure("Software Bug"), failure("Faulty GPU")
    manual = Response("manual", per_class).act(bug, 0.0)
    assert manual > 600
    assert Response("goodput", per_class).act(bug, 0.0) == manual
    assert Response("goodput", per_class).detect(bug, 0.0) == pytest.approx(1.0 * math.exp(0.5 * 0.4))
    assert Response("goodput", per_class).act(gpu, 0.0) == pytest.approx(1.2 * math.exp(0.5 * 0.7))
    # One latency for every failure (the command line), and the seed: still a person for an app-error,
    # for no automation fixes the application's bug; a GPU fault is automated.
    assert Response("goodput", SHORT).act(bug, 0.0) == manual
    assert Response("seed", per_class).act(bug, 0.0) == manual
    assert Response("seed", per_class).act(gpu, 0.0) < 600
    assert Response("goodput", SHORT).act(gpu, 0.0) == pytest.approx(SHORT.action_s * math.exp(0.5 * 0.7))


def test_the_renewal_reward_estimate_follows_the_class_mix() -> None:
    p = SimParams(days=54, spares=10_000, class_latency=FIXTURE_LATENCY)
    hs = _histories(p, 8)
    sim = sum(_ettr(p, h, "goodput") for h in hs) / len(hs)
    assert sim == pytest.approx(analytic_ettr(p, "goodput"), abs=0.006)
    # 2,700 s more detection costs in proportion to the class's share: hang (10 %) far more than crash (1.7 %).
    def slower(name: str) -> SimParams:
        return dataclasses.replace(p, class_latency=tuple((c, d + 2700.0 if c == name else d, a)
                                                          for c, d, a in FIXTURE_LATENCY))
    hang_cost = analytic_ettr(p, "goodput") - analytic_ettr(slower("hang"), "goodput")
    crash_cost = analytic_ettr(p, "goodput") - analytic_ettr(slower("crash"), "goodput")
    assert hang_cost > 0.015 and 0 < crash_cost < hang_cost / 4


def test_latencies_per_class_from_the_latency_benchmark_json(capsys: pytest.CaptureFixture[str]) -> None:
    source = read_latency_file(FIXTURE)
    assert source.class_latency == FIXTURE_LATENCY
    assert (source.commit, source.settings) == ("abc1234", "defaults")
    argv = ["--from-latency-json", str(FIXTURE), "--reps", "2", "--days", "5", "--sweep-min", "", "--json"]
    r = goodput_sim.run(argv)
    out = capsys.readouterr().out
    lat = json.loads(out.strip().splitlines()[-1])["goodput_latencies"]
    assert (lat["source"], lat["commit"], lat["settings"]) == (str(FIXTURE), "abc1234", "defaults")
    assert lat["classes"]["hang"]["detection_p50_s"] == 302.0 and lat["classes"]["hang"]["action_by"] == "goodput"
    assert lat["classes"]["app-error"]["action_p50_s"] is None and lat["classes"]["app-error"]["action_by"] == "person"
    assert r["params"]["goodput_latency_source"] == str(FIXTURE) and r["params"]["detection_s"] is None
    assert "commit abc1234" in out and "takes no action" in out
    cli = goodput_sim.run(["--reps", "2", "--days", "5", "--sweep-min", "", "--detection-s", "2.9",
                           "--action-s", "1.2"])
    capsys.readouterr()
    assert cli["goodput_latencies"]["source"] == "command line"
    assert r["models"]["goodput"]["hours"]["detection"] > 2 * cli["models"]["goodput"]["hours"]["detection"]
    assert r["models"]["seed"] == cli["models"]["seed"]  # the same failures; only goodput's latencies differ


def _fixture_without(edit: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    if edit == "old format":
        return {"detection_p50_s": 0.517, "action_p50_s": 0.614, "per_kind": {"crash": {"n": 50}}}
    if edit == "hang":
        del data["classes"]["hang"]
    if edit == "crash action":
        data["classes"]["crash"]["action_p50_s"] = None
    return data


@pytest.mark.parametrize(("edit", "named"), [("old format", "no 'classes' key"), ("hang", "lacks hang"),
                                             ("crash action", "classes.crash.action_p50_s")])
def test_a_latency_file_without_usable_classes_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str, named: str) -> None:
    src = tmp_path / "latency.json"
    src.write_text(json.dumps(_fixture_without(edit)))
    with pytest.raises(LatencyFileError, match=named):
        read_latency_file(src)
    with pytest.raises(SystemExit):
        goodput_sim.run(["--from-latency-json", str(src), "--reps", "1", "--days", "1", "--sweep-min", ""])
    err = capsys.readouterr().err
    assert str(src) in err and named in err


def test_a_free_checkpoint_save_runs_with_the_levers() -> None:
    """Daly's interval for a save that costs nothing is 0; the levers must still run (they crashed)."""
    r = goodput_sim.run(["--ckpt-save-s", "0", "--reps", "2", "--days", "3", "--sweep-min", ""])
    assert r["levers"]["daly_interval_min"] == 1.0
    assert r["ettr_goodput"] > r["ettr_manual"]
