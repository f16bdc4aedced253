"""`goodput checkpoints ROOT`: the resume point, why, and how to load it, as a start-up script sees it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from goodput.checkpoints.report import run_checkpoints
from tests.fakes.checkpoint_bytes import dcp_metadata, file_bytes

pytestmark = pytest.mark.timeout(60)
LATER = datetime.now(UTC) + timedelta(hours=1)
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


def deepspeed_run(root: Path) -> None:
    """Steps 10 and 20 of a 2-rank ZeRO run; `latest` names 20, whose rank-1 optimizer file was cut."""
    for step in (10, 20):
        tag = root / f"global_step{step}"
        tag.mkdir(parents=True)
        (tag / "mp_rank_00_model_states.pt").write_bytes(file_bytes("x.pt", 2048, {"dp_world_size": 2}))
        for rank in range(2):
            (tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(file_bytes("x.pt", 4096))
    (root / "latest").write_text("global_step20")
    with (root / "global_step20" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").open("r+b") as shard:
        shard.truncate(3000)


def test_json_names_the_choice_how_to_load_it_and_the_pointer_it_overrides(tmp_path: Path) -> None:
    deepspeed_run(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert run_checkpoints(str(tmp_path), None, True, out, err, LATER) == 0
    report = json.loads(out.getvalue())
    assert report["layout"] == "deepspeed"
    assert report["resume_from"]["step"] == 10 and report["resume_from"]["tag"] == "global_step10"
    assert report["resume_from"]["how"] == f'DeepSpeed: engine.load_checkpoint("{tmp_path}", tag="global_step10")'
    assert report["resume_from"]["files_read"] == 3 and report["resume_from"]["bytes_read"] > 0
    (skipped,) = report["skipped"]
    assert skipped["step"] == 20 and "zero_pp_rank_1_mp_rank_00_optim_states.pt: truncated" in skipped["reason"]
    assert "the framework's own pointer names global_step20" in report["explanation"]


def test_text_lists_every_candidate_with_its_cost(tmp_path: Path) -> None:
    deepspeed_run(tmp_path)
    out = io.StringIO()
    assert run_checkpoints(str(tmp_path), "deepspeed", False, out, io.StringIO(), LATER) == 0
    text = out.getvalue()
    assert "resume: step 10" in text and "BAD step 20" in text and "(the framework's pointer)" in text
    assert "checked by reading 3 files" in text


def test_exit_status_says_whether_there_is_anything_to_resume_from(tmp_path: Path) -> None:
    (tmp_path / "step-5").mkdir()
    (tmp_path / "step-5" / ".metadata").write_bytes(dcp_metadata({"__0_0.distcp": 64}))
    (tmp_path / "step-5" / "__0_0.distcp").write_bytes(b"x" * 10)
    err = io.StringIO()
    assert run_checkpoints(str(tmp_path), None, False, io.StringIO(), err, LATER) == 1
    assert run_checkpoints(str(tmp_path), "no-such-layout", False, io.StringIO(), err, LATER) == 2
    assert "unknown checkpoint layout" in err.getvalue()


def test_the_console_script(tmp_path: Path) -> None:
    deepspeed_run(tmp_path)
    done = subprocess.run([*GOODPUT, "checkpoints", str(tmp_path), "--json", "--settle", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resume_from"]["step"] == 10
