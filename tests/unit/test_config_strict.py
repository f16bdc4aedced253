"""Strict settings: an unknown key in the config file or an unknown GOODPUT_* variable stops
start-up, naming the file (or the variable), the key and the closest valid name, never a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from goodput.config import Settings
from goodput.config_sources import SettingsError

SECRET = "s3cr3t-token-do-not-print-0123456789"


@pytest.fixture
def toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "goodput.toml"
    path.touch(mode=0o600)
    monkeypatch.setenv("GOODPUT_CONFIG", str(path))
    return path


def refused(*lines: str, toml: Path) -> str:
    toml.write_text("\n".join(lines) + "\n")
    with pytest.raises(SettingsError) as error:
        Settings()
    return str(error.value)


def test_a_typo_in_a_nested_policy_table_names_the_file_key_and_closest_name(toml: Path) -> None:
    message = refused("[policy.breaker]", "max_drains = 1", toml=toml)
    assert str(toml) in message
    assert "policy.breaker.max_drains" in message
    assert "did you mean policy.breaker.max_drained_nodes?" in message


def test_a_typo_directly_in_policy(toml: Path) -> None:
    message = refused("[policy]", 'moed = "autonomous"', toml=toml)
    assert "policy.moed" in message and "did you mean policy.mode?" in message


def test_a_typo_in_opt_in(toml: Path) -> None:
    message = refused("[opt_in]", 'partitons = ["gpu"]', toml=toml)
    assert "opt_in.partitons" in message and "did you mean opt_in.partitions?" in message


def test_a_typo_in_a_console_user_never_prints_the_token(toml: Path) -> None:
    message = refused("[[console.users]]", 'name = "ops"', 'role = "admin"', f'tokn = "{SECRET}"', toml=toml)
    assert "console.users.0.tokn" in message and "did you mean console.users.0.token?" in message
    assert SECRET not in message


def test_a_top_level_typo_suggests_the_setting(toml: Path) -> None:
    message = refused(f'temporal_api_kye = "{SECRET}"', toml=toml)
    assert "temporal_api_kye" in message and "did you mean temporal_api_key?" in message
    assert SECRET not in message


def test_every_unknown_key_is_listed_at_once(toml: Path) -> None:
    message = refused("[policy]", "moed = 'approve'", "[opt_in]", "partitons = []", toml=toml)
    assert "policy.moed" in message and "opt_in.partitons" in message


def test_an_unknown_environment_variable_is_named_with_the_closest(monkeypatch: pytest.MonkeyPatch,
                                                                   toml: Path) -> None:
    monkeypatch.setenv("GOODPUT_TEMPORAL_ADRESS", SECRET)
    with pytest.raises(SettingsError) as error:
        Settings()
    assert "environment variable GOODPUT_TEMPORAL_ADRESS" in str(error.value)
    assert "did you mean GOODPUT_TEMPORAL_ADDRESS?" in str(error.value)
    assert SECRET not in str(error.value)


def test_an_unknown_nested_policy_variable(monkeypatch: pytest.MonkeyPatch, toml: Path) -> None:
    monkeypatch.setenv("GOODPUT_POLICY__BREAKER__MAX_DRAINS", "1")
    with pytest.raises(SettingsError) as error:
        Settings()
    assert "GOODPUT_POLICY__BREAKER__MAX_DRAINS" in str(error.value)
    assert "did you mean GOODPUT_POLICY__BREAKER__MAX_DRAINED_NODES?" in str(error.value)


def test_an_unknown_key_inside_a_json_variable(monkeypatch: pytest.MonkeyPatch, toml: Path) -> None:
    monkeypatch.setenv("GOODPUT_POLICY", '{"mode": "approve", "breaker": {"max_drains": 1}}')
    with pytest.raises(SettingsError) as error:
        Settings()
    assert "GOODPUT_POLICY" in str(error.value) and "breaker.max_drains" in str(error.value)
    assert "did you mean" in str(error.value)


def test_a_console_user_typo_inside_a_json_variable_hides_the_token(monkeypatch: pytest.MonkeyPatch,
                                                                   toml: Path) -> None:
    monkeypatch.setenv("GOODPUT_CONSOLE__USERS", f'[{{"name": "ops", "role": "admin", "tokn": "{SECRET}"}}]')
    with pytest.raises(SettingsError) as error:
        Settings()
    assert "GOODPUT_CONSOLE__USERS" in str(error.value) and "0.tokn" in str(error.value)
    assert SECRET not in str(error.value)


def test_known_variables_and_free_form_maps_still_work(monkeypatch: pytest.MonkeyPatch, toml: Path) -> None:
    toml.write_text('[policy.partition_modes]\nany-partition-name = "approve"\n')
    monkeypatch.setenv("GOODPUT_POLICY__BREAKER__MAX_DRAINED_NODES", "1")
    monkeypatch.setenv("GOODPUT_POLICY__PARTITION_MODES", '{"gpu": "autonomous"}')
    monkeypatch.setenv("GOODPUT_LOG_FORMAT", "json")  # read by goodput, not a setting
    monkeypatch.setenv("GOODPUT_RESUME_FROM", "/ckpt/step-10")  # a resumed job's environment
    settings = Settings()
    assert settings.policy.breaker.max_drained_nodes == 1
    assert settings.policy.mode_for("gpu").value == "autonomous"


def test_the_cli_refuses_to_start_on_a_typo_naming_key_and_file_never_the_value(
        toml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from workers.main import dispatch
    toml.write_text(f'[policy.breaker]\nmax_drains = 1\n[console]\nsesion_secret = "{SECRET}"\n')
    monkeypatch.setenv("COLUMNS", "400")
    assert dispatch(["audit", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "policy.breaker.max_drains" in err and "max_drained_nodes" in err and str(toml) in err
    assert "console.sesion_secret" in err and "did you mean console.session_secret?" in err
    assert SECRET not in err


def test_an_invalid_secret_value_is_named_never_printed(monkeypatch: pytest.MonkeyPatch, toml: Path,
                                                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from workers.main import dispatch
    monkeypatch.setenv("GOODPUT_CONSOLE__SESSION_SECRET", "too-short-" + SECRET[:12])
    monkeypatch.setenv("COLUMNS", "400")
    assert dispatch(["audit", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "console.session_secret" in err and "GOODPUT_CONSOLE__SESSION_SECRET" in err
    assert SECRET[:12] not in err
