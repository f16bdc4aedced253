"""The console's session key and embedded admin token are trusted only as goodput left them: a
regular file of this user's, mode 0600, no symbolic link. A key someone else planted signs
whatever admin cookie they forge; a token they planted is a password they know."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser
from goodput.private_files import PrivateFileError
from workers.console.server import authenticator
from workers.resubmit_key import ResubmitKeyError, _stored_secret

NOBODY = 65534
USERS = (ConsoleUser(name="olga", role="operator", token="operator-token-" + "o" * 20),)


def test_generated_keys_are_private_and_stable(tmp_path: Path) -> None:
    first, token_file = authenticator(ConsoleSettings(), tmp_path)
    assert token_file is not None and oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "console-session.key").stat().st_mode & 0o777) == "0o600"
    again, _ = authenticator(ConsoleSettings(), tmp_path)
    admin = token_file.read_text().strip()
    assert first.user_for_token(admin) is not None and again.user_for_token(admin) is not None


@pytest.mark.parametrize("name", ["console-session.key", "console-admin.token"])
def test_a_key_readable_by_others_is_refused(tmp_path: Path, name: str) -> None:
    planted = tmp_path / name
    planted.write_text("k" * 64)
    planted.chmod(0o644)
    with pytest.raises(PrivateFileError, match=f"{name}.*0600"):
        authenticator(ConsoleSettings(), tmp_path)


@pytest.mark.parametrize("name", ["console-session.key", "console-admin.token"])
def test_a_symlinked_key_is_refused(tmp_path: Path, name: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("k" * 64)
    elsewhere.chmod(0o600)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / name).symlink_to(elsewhere)
    with pytest.raises(PrivateFileError, match="symbolic link"):
        authenticator(ConsoleSettings(), tmp_path / "data")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
@pytest.mark.parametrize("name", ["console-session.key", "console-admin.token"])
def test_a_key_owned_by_another_user_is_refused(tmp_path: Path, name: str) -> None:
    planted = tmp_path / name
    planted.write_text("k" * 64)
    planted.chmod(0o600)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(PrivateFileError, match="owned by uid 65534"):
        authenticator(ConsoleSettings(), tmp_path)


def test_a_key_owned_by_another_user_is_refused_whoever_runs_the_test(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmp_path / "console-session.key"
    planted.write_text("k" * 64)
    planted.chmod(0o600)
    monkeypatch.setattr(os, "geteuid", lambda: planted.stat().st_uid + 1)
    with pytest.raises(PrivateFileError, match="owned by uid"):
        authenticator(ConsoleSettings(users=USERS), tmp_path)


def test_a_fifo_in_place_of_a_key_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "console-session.key", 0o600)
    with pytest.raises(PrivateFileError, match="regular file"):
        authenticator(ConsoleSettings(users=USERS), tmp_path)


def test_the_resubmit_key_shares_the_checks(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("k" * 64)
    elsewhere.chmod(0o600)
    (tmp_path / "resubmit.key").symlink_to(elsewhere)
    with pytest.raises(ResubmitKeyError, match="symbolic link"):
        _stored_secret(tmp_path / "resubmit.key")
