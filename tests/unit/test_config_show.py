"""`goodput config show [--origin]`: the effective settings, secrets redacted, and under --origin
where each value came from, in the one precedence: flags > environment > file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.main import dispatch

SECRET = "s3cr3t-token-do-not-print-0123456789"
HOOK = "https://hooks.slack.example/services/T000/B000/XXXXhooksecret"


@pytest.fixture
def toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "goodput.toml"
    path.touch(mode=0o600)
    path.write_text('cluster = "from-file"\nnamespace = "from-file"\ntemporal_address = "file:7233"\n'
                    f'notify_webhook_url = "{HOOK}"\n'
                    '[policy]\nmode = "approve"\n[policy.breaker]\nmax_drained_nodes = 1\n'
                    f'[[console.users]]\nname = "ops"\nrole = "admin"\ntoken = "{SECRET}"\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(toml_path := path))
    return toml_path


def shown(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    assert dispatch(argv) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "hooksecret" not in out
    return {line.split(" = ", 1)[0]: line.split(" = ", 1)[1] for line in out.splitlines() if " = " in line}


def test_show_prints_the_effective_settings_with_secrets_redacted(toml: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOODPUT_TEMPORAL_API_KEY", SECRET)
    lines = shown(capsys, "config", "show")
    assert lines["cluster"] == '"from-file"'
    assert lines["policy.mode"] == '"approve"'
    assert lines["policy.breaker.max_drained_nodes"] == "1"
    assert lines["policy.breaker.window_s"] == "600.0"
    assert lines["temporal_api_key"] == '"**********"'
    assert "hooks.slack.example" in lines["notify_webhook_url"]


def test_origin_follows_flags_over_env_over_file_over_defaults(toml: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOODPUT_NAMESPACE", "from-env")
    monkeypatch.setenv("GOODPUT_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.setenv("GOODPUT_POLICY__BREAKER__WINDOW_S", "60")
    lines = shown(capsys, "--temporal", "flag:7233", "config", "show", "--origin")
    assert lines["temporal_address"] == '"flag:7233"  # flag --temporal'
    assert lines["namespace"] == '"from-env"  # env GOODPUT_NAMESPACE'
    assert lines["cluster"] == f'"from-file"  # file {toml}'
    assert lines["policy.breaker.max_drained_nodes"] == f"1  # file {toml}"
    assert lines["policy.breaker.window_s"] == "60.0  # env GOODPUT_POLICY__BREAKER__WINDOW_S"
    assert lines["policy.breaker.cooldown_s"] == "1800.0  # default"
    assert lines["console.users"].endswith(f"# file {toml}")


def test_a_json_variable_is_the_origin_only_of_the_keys_it_sets(toml: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOODPUT_POLICY", '{"resume": "resubmit"}')
    lines = shown(capsys, "config", "show", "--origin")
    assert lines["policy.resume"] == '"resubmit"  # env GOODPUT_POLICY'
    assert lines["policy.mode"] == f'"approve"  # file {toml}'
    assert lines["policy.linger_s"] == "30.0  # default"
