"""Settings precedence: environment over goodput.toml over defaults; typos are errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from goodput.config import Settings
from goodput.models import Mode


def test_defaults_are_the_embedded_monitor_mode_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))
    settings = Settings()
    assert settings.policy.mode is Mode.MONITOR
    assert settings.temporal_address == "127.0.0.1:7233"
    assert settings.temporal_db == Path(".goodput/temporal.db")


def test_env_overrides_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    toml = tmp_path / "goodput.toml"
    toml.write_text('cluster = "from-toml"\n[policy]\nmode = "approve"\n'
                    '[policy.partition_modes]\ntrusted = "autonomous"\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(toml))
    monkeypatch.setenv("GOODPUT_CLUSTER", "from-env")
    settings = Settings()
    assert settings.cluster == "from-env"
    assert settings.policy.mode is Mode.APPROVE
    assert settings.policy.mode_for("trusted") is Mode.AUTONOMOUS


def test_unknown_keys_are_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    toml = tmp_path / "goodput.toml"
    toml.write_text('temporal_adress = "typo:7233"\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(toml))
    with pytest.raises(ValidationError, match="temporal_adress"):
        Settings()
