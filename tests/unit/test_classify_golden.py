"""`goodput classify` over the fixture logs, compared with reviewed golden verdicts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from goodput.diagnose.classify import run_classify

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
FIXTURES = sorted(p.name for p in LOGS.iterdir() if not p.name.endswith(".expected.json"))
KEYS = {"path", "category", "culprit_kind", "culprit", "restart", "drain", "exclude", "signatures", "evidence",
        "explanation", "culprit_host", "culprit_gpu", "culprit_rank", "confidence", "settle",
        "restart_effect"}


def classify_json(monkeypatch: pytest.MonkeyPatch, *names: str) -> tuple[int, list[dict[str, object]], str]:
    monkeypatch.chdir(LOGS)
    out, err = io.StringIO(), io.StringIO()
    rc = run_classify(list(names), True, out, err)
    return rc, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_every_fixture_has_a_golden() -> None:
    assert len(FIXTURES) >= 12
    for name in FIXTURES:
        assert (LOGS / (name.rsplit(".", 1)[0] + ".expected.json")).is_file(), name


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_golden(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    rc, objs, err = classify_json(monkeypatch, name)
    assert (rc, err, len(objs)) == (0, "", 1)
    golden = json.loads((LOGS / (name.rsplit(".", 1)[0] + ".expected.json")).read_text(encoding="utf-8"))
    assert set(objs[0]) == KEYS
    assert objs[0] == golden


# The decisions that matter, stated independently of the goldens so a careless regeneration of the
# golden files cannot hide a wrong verdict.
DECISIONS = {
    "xid79_fallen_off_bus.log": ("gpu-hardware", "gpu", "gpu-b17 GPU 0000:9a:00", True, True),
    "nccl_timeout_after_xid.log": ("gpu-hardware", "gpu", "node002 GPU 0000:bb:00", True, True),
    "app_exception_rank3.log": ("app-error", "app", "rank 3", False, False),
    "torchrun_child_failed.log": ("app-error", "app", "rank 5", False, False),
    "cuda_oom.log": ("oom", "app", "rank 2", False, False),
    "host_oom_killer.log": ("oom", "app", "rank 6", False, False),
    "enospc_checkpoint.log": ("storage", "storage", "/lustre/proj/llm7b/checkpoints/iter_0005000/__0_0.distcp",
                              False, False),
    "slurm_time_limit.log": ("scheduler-policy", "app", None, False, False),
    "slurm_node_failure.log": ("node-failure", "node", "dgx-r2-07", True, True),
    "gpu_off_bus_noxid.log": ("gpu-hardware", "gpu", "gpu-h08 GPU 0000:98:00.0", True, True),
    "cuda_ecc_rank.log": ("gpu-hardware", "node", "h100-x-0041", True, True),
    "nccl_ib_error.log": ("network", "network", "ib-n03 <-> 10.42.7.14", True, False),
    "nccl_desync_report.log": ("nccl-timeout", "rank", "rank 6", True, False),
    "dataloader_shm.log": ("app-error", "app", "rank 1", False, False),
    "clean_training.log": ("unknown", "unknown", None, False, False),
    "binary_garbage.bin": ("unknown", "unknown", None, False, False),
    "huge_line.log": ("node-failure", "node", "gpu-z99", True, True),
}


@pytest.mark.parametrize("name", sorted(DECISIONS))
def test_decisions(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _, (obj,), _ = classify_json(monkeypatch, name)
    assert (obj["category"], obj["culprit_kind"], obj["culprit"], obj["restart"], obj["drain"]) == DECISIONS[name]


def test_huge_line_evidence_points_at_the_right_line_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    _, (obj,), _ = classify_json(monkeypatch, "huge_line.log")
    assert [e["line"] for e in obj["evidence"]] == [2, 3]  # type: ignore[union-attr, index]


def test_several_paths_one_object_each_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    rc, objs, _ = classify_json(monkeypatch, "cuda_oom.log", "clean_training.log", "cuda_oom.log")
    assert rc == 0
    assert [o["path"] for o in objs] == ["cuda_oom.log", "clean_training.log", "cuda_oom.log"]


def test_missing_file_is_an_error_but_other_paths_are_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    rc, objs, err = classify_json(monkeypatch, "no-such.log", "cuda_oom.log", ".")
    assert rc != 0
    assert [o["path"] for o in objs] == ["cuda_oom.log"]
    assert "no-such.log" in err and "No such file" in err
    assert "cannot read ." in err  # a directory is unreadable as a log, not a crash


def test_text_report_is_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOGS)
    out, err = io.StringIO(), io.StringIO()
    assert run_classify(["xid79_fallen_off_bus.log", "cuda_oom.log"], False, out, err) == 0
    text = out.getvalue()
    assert "== xid79_fallen_off_bus.log" in text and "== cuda_oom.log" in text
    assert "category:   gpu-hardware" in text
    assert "culprit:    gpu-b17 GPU 0000:9a:00 (gpu)" in text
    assert "drain:      yes" in text
    assert "     6 | Nov 29 07:41:02 gpu-b17 kernel: NVRM: Xid" in text or "   6 | Nov 29" in text
    assert not text.lstrip().startswith("{")
