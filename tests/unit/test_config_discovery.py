"""Where goodput finds its configuration, and what it refuses: `--config`/`GOODPUT_CONFIG`, then
./goodput.toml only when the operator (or root) owns it and its directory and no one else can
write them, then the user's config directory, then /etc/goodput. A config planted by another user
would send the Temporal API key to their address. Settings errors name the key and where it came
from, never the value (tokens, OAuth secrets)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goodput import config_sources
from goodput.config import Settings
from goodput.private_files import PrivateFileError
from workers.main import dispatch

NOBODY = 65534
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
SECRET = "tok-s3cret-0123456789abcdef"


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of the operator's with no config anywhere else."""
    for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
        monkeypatch.delenv(key)
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "400")  # one line per error, as the assertions read it
    monkeypatch.setattr(config_sources, "SYSTEM_CONFIG", tmp_path / "etc" / "goodput.toml")
    return work


def _toml(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_operators_own_goodput_toml_in_the_working_directory_is_read(where: Path) -> None:
    _toml(where / "goodput.toml", 'cluster = "from-cwd"\n')
    assert Settings().cluster == "from-cwd"


@AS_ROOT
def test_a_goodput_toml_another_user_owns_is_refused(where: Path) -> None:
    _toml(where / "goodput.toml", 'temporal_address = "evil.example:7233"\n')
    os.chown(where / "goodput.toml", NOBODY, NOBODY)
    with pytest.raises(PrivateFileError, match=r"goodput.toml is owned by uid 65534"):
        Settings()


def test_a_goodput_toml_others_can_write_is_refused(where: Path) -> None:
    _toml(where / "goodput.toml", 'cluster = "x"\n', mode=0o666)
    with pytest.raises(PrivateFileError, match=r"goodput.toml has mode 0666: others can write it"):
        Settings()


@AS_ROOT
def test_a_goodput_toml_in_a_directory_another_user_owns_is_refused(where: Path) -> None:
    _toml(where / "goodput.toml", 'cluster = "x"\n')
    os.chown(where, NOBODY, NOBODY)
    with pytest.raises(PrivateFileError, match="another user owns or can write"):
        Settings()


@AS_ROOT
def test_without_one_here_the_user_config_dir_then_etc_goodput(where: Path, tmp_path: Path) -> None:
    assert Settings().cluster == "default"
    _toml(tmp_path / "etc" / "goodput.toml", 'cluster = "from-etc"\n')
    assert Settings().cluster == "from-etc"
    _toml(tmp_path / "xdg" / "goodput" / "goodput.toml", 'cluster = "from-xdg"\n')
    assert Settings().cluster == "from-xdg"
    os.chown(tmp_path / "xdg" / "goodput" / "goodput.toml", NOBODY, NOBODY)
    with pytest.raises(PrivateFileError, match="owned by uid 65534"):
        Settings()


def test_an_explicit_config_wins_and_is_checked_too(where: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _toml(where / "goodput.toml", 'cluster = "from-cwd"\n')
    explicit = _toml(tmp_path / "site.toml", 'cluster = "explicit"\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(explicit))
    assert Settings().cluster == "explicit"
    explicit.chmod(0o646)
    with pytest.raises(PrivateFileError, match="others can write"):
        Settings()


@AS_ROOT
def test_the_config_flag_names_the_file(where: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    explicit = _toml(tmp_path / "site.toml", f'data_dir = "{tmp_path / "data"}"\n')
    (tmp_path / "data").mkdir(mode=0o700)
    os.chown(tmp_path / "data", NOBODY, NOBODY)
    assert dispatch(["--config", str(explicit), "audit"]) == 2
    err = capsys.readouterr().err
    assert "data directory" in err and str(tmp_path / "data") in err and "owned by uid 65534" in err


def test_a_data_directory_in_the_working_directory_others_can_write_is_refused(
        where: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (where / ".goodput").mkdir()
    (where / ".goodput").chmod(0o777)
    assert dispatch(["audit"]) == 2
    err = capsys.readouterr().err
    assert "data directory .goodput" in err and "others can write" in err


@AS_ROOT
def test_the_default_data_directory_in_another_users_directory_is_refused(
        where: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.chown(where, NOBODY, NOBODY)
    assert dispatch(["audit"]) == 2
    assert "another user owns or can write" in capsys.readouterr().err
    assert not (where / ".goodput").exists()


def test_a_named_data_directory_need_only_be_this_users_or_roots(where: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A Kubernetes emptyDir: root's, mode 0777, private to the pod.
    data = tmp_path / "volume"
    data.mkdir()
    data.chmod(0o777)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(data))
    assert dispatch(["audit"]) == 0


def test_settings_errors_name_the_key_and_its_file_never_the_value(where: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _toml(where / "goodput.toml", f'otlp_endpoint = "https://user:{SECRET}@collector /v1"\n'
          f'[[console.users]]\nname = "olga"\ntoken = "{SECRET}"\n')
    assert dispatch(["audit"]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "s3cret" not in err
    assert "console.users.0.role" in err and "otlp_endpoint" in err and "goodput.toml" in err


def test_settings_errors_from_the_environment_name_the_variable(where: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOODPUT_CONSOLE__SESSION_SECRET", "short-s3cret")
    monkeypatch.setenv("GOODPUT_CONSOLE__USERS", f'[{{"name": "olga", "token": "{SECRET}"}}]')
    assert dispatch(["audit"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err
    assert "console.session_secret" in err and "GOODPUT_CONSOLE__SESSION_SECRET" in err
    assert "console.users.0.role" in err and "GOODPUT_CONSOLE__USERS" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root's files are trusted whatever the euid says")
def test_a_config_another_user_owns_is_refused_without_root(where: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _toml(tmp_path / "site.toml", 'cluster = "theirs"\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(explicit))
    monkeypatch.setattr(os, "geteuid", lambda: explicit.stat().st_uid + 1)
    with pytest.raises(PrivateFileError, match="owned by uid"):
        Settings()
