"""Settings precedence: environment over goodput.toml over defaults; typos are errors."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from goodput.config import Settings
from goodput.config_sources import SettingsError
from goodput.detect.hang import DEFAULT_HANG_CONFIG
from goodput.models import Mode
from goodput.slurm.submit_as import BecomeMode
from workers.resubmit_key import ResubmitKeyError, resubmit_key_from


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
    with pytest.raises(SettingsError, match=r"temporal_adress.*did you mean temporal_address"):
        Settings()


def test_the_resubmit_key_is_generated_once_private_and_never_shown(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))
    settings = Settings(data_dir=tmp_path / "data")
    first = resubmit_key_from(settings)
    stored = tmp_path / "data" / "resubmit.key"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert resubmit_key_from(settings).token("8") == first.token("8")  # a restart recognises its copies
    assert stored.read_text().strip() not in repr(first)
    stored.chmod(0o644)
    with pytest.raises(ResubmitKeyError, match="mode 0600"):
        resubmit_key_from(settings)


def test_a_configured_resubmit_key_is_shared_and_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("GOODPUT_RESUBMIT_KEY", "correct-horse-battery-staple")
    one, two = Settings(data_dir=tmp_path / "a"), Settings(data_dir=tmp_path / "b")
    assert "correct-horse" not in repr(one) and "correct-horse" not in str(one.model_dump())
    assert resubmit_key_from(one).token("8") == resubmit_key_from(two).token("8")
    assert not (tmp_path / "a" / "resubmit.key").exists()
    monkeypatch.setenv("GOODPUT_RESUBMIT_KEY", "short-s3cret")
    with pytest.raises(ResubmitKeyError) as refused:
        resubmit_key_from(Settings(data_dir=tmp_path / "a"))
    assert "s3cret" not in str(refused.value)


def test_resubmission_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("GOODPUT_SLURM__RESUBMIT_AS", "sudo")
    assert Settings().slurm.resubmit_as is BecomeMode.SUDO
    with pytest.raises(ValidationError):
        Settings(slurm={"resubmit_as": "root"})
    with pytest.raises(ValidationError):
        Settings(slurm={"resubmit_path": "/bin,/tmp"})


def test_hang_settings_reach_the_watchers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "absent.toml"))
    assert Settings().watch_request().hang == DEFAULT_HANG_CONFIG
    monkeypatch.setenv("GOODPUT_HANG__FLOOR_S", "30")
    monkeypatch.setenv("GOODPUT_HANG__EVALUATION_S", "3600")
    hang = Settings().watch_request().hang
    assert (hang.floor_s, hang.evaluation_s, hang.k) == (30.0, 3600.0, DEFAULT_HANG_CONFIG.k)
