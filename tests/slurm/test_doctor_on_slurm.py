"""`goodput doctor` on the lab: it passes against the real cluster and names Slurm, with the fix,
when the service cannot reach it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GOODPUT, "doctor", *args], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_doctor_passes_on_the_lab_and_names_slurm_when_it_is_unreachable(lab: Lab, temporal_address: str,
                                                                         tmp_path: Path) -> None:
    env = {**os.environ, "SLURM_CONF": str(lab.conf), "GOODPUT_SCHEDULER": "slurm-cli",
           "GOODPUT_TEMPORAL_ADDRESS": temporal_address, "GOODPUT_DATA_DIR": str(tmp_path / "data"),
           "GOODPUT_CONFIG": str(tmp_path / "none.toml"), "GOODPUT_CLUSTER": f"doc{uuid.uuid4().hex[:6]}"}
    healthy = doctor(env, "--json")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    found = {r["name"]: r for r in map(json.loads, healthy.stdout.splitlines())}
    assert found["slurm nodes"]["status"] == "ok" and found["slurm nodes"]["found"].startswith("4 node(s)")
    assert found["drain rights"]["status"] == "ok"  # root, as the lab's tests run

    broken = doctor({**env, "SLURM_CONF": str(tmp_path / "missing.conf")})
    assert broken.returncode == 1
    assert "[FAIL] slurm nodes" in broken.stdout and "fix: run on a host with Slurm's client commands" in broken.stdout
    assert "[skip] slurm jobs" in broken.stdout and "[ok  ] temporal" in broken.stdout
