"""Console credentials: tokens, signed sessions and CSRF tokens cannot be guessed, forged,
replayed past expiry or carried from one session to another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from goodput.console.auth import SESSION_TTL, ConsoleUser, Role, TokenAuthenticator, bearer_token

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
VERA = ConsoleUser(name="vera", role="viewer", token="v" * 24)
OLGA = ConsoleUser(name="olga", role="operator", token="o" * 24)


def auth(*users: ConsoleUser, secret: bytes = b"k" * 32) -> TokenAuthenticator:
    return TokenAuthenticator(users or (VERA, OLGA), secret)


def test_roles_are_ordered_and_parsed_by_name() -> None:
    assert Role.ADMIN > Role.OPERATOR > Role.VIEWER
    assert Role.parse(" Operator ") is Role.OPERATOR
    with pytest.raises(ValueError, match="viewer, operator or admin"):
        Role.parse("root")


def test_users_need_long_tokens_known_roles_and_plain_names() -> None:
    for bad in ({"token": "short"}, {"role": "root"}, {"name": "ev il"}, {"name": "x" * 65}):
        with pytest.raises(ValidationError):
            ConsoleUser.model_validate({"name": "a", "role": "viewer", "token": "t" * 20, **bad})
    assert "o" * 24 not in repr(OLGA)  # the token never shows in logs or pages


def test_a_bearer_token_names_its_user_and_a_wrong_one_nobody() -> None:
    a = auth()
    who = a.from_bearer("o" * 24)
    assert who is not None and (who.name, who.role, who.via_session) == ("olga", Role.OPERATOR, False)
    assert a.from_bearer("o" * 23) is None and a.from_bearer("") is None
    assert bearer_token({"authorization": "Bearer  abc "}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None and bearer_token({}) is None


def test_a_session_is_its_user_until_it_expires() -> None:
    a = auth()
    cookie = a.new_session(OLGA, NOW)
    who = a.from_session(cookie, NOW + timedelta(hours=1))
    assert who is not None and who.name == "olga" and who.via_session and who.session_id
    assert a.from_session(cookie, NOW + SESSION_TTL + timedelta(seconds=1)) is None


def test_a_session_signed_with_another_secret_or_edited_is_nobody() -> None:
    cookie = auth().new_session(VERA, NOW)
    assert auth(secret=b"x" * 32).from_session(cookie, NOW) is None
    body, _, signature = cookie.rpartition(".")
    edited = body[:3] + ("A" if body[3] != "A" else "B") + body[4:]  # other bytes, not other padding
    other = signature[:-1] + ("B" if signature.endswith("A") else "A")
    for forged in (f"{edited}.{signature}", f"{body}.{other}", "", ".", "a" * 5000, "\x00.\x00"):
        assert auth().from_session(forged, NOW) is None


def test_a_removed_user_or_a_changed_role_takes_effect_on_the_next_request() -> None:
    cookie = auth().new_session(OLGA, NOW)
    assert auth(VERA).from_session(cookie, NOW) is None
    demoted = auth(VERA, OLGA.model_copy(update={"role": "viewer"}))
    who = demoted.from_session(cookie, NOW)
    assert who is not None and who.role is Role.VIEWER


def test_csrf_tokens_belong_to_one_session() -> None:
    a = auth()
    first = a.from_session(a.new_session(OLGA, NOW), NOW)
    second = a.from_session(a.new_session(OLGA, NOW), NOW)
    assert first is not None and second is not None
    assert a.csrf_ok(first, a.csrf_token(first))
    assert not a.csrf_ok(first, a.csrf_token(second)) and not a.csrf_ok(first, "")
    bearer = a.from_bearer("o" * 24)
    assert bearer is not None and a.csrf_ok(bearer, "")  # no ambient credential, nothing to forge


def test_the_session_secret_must_be_long() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TokenAuthenticator((VERA,), b"short")


def test_odd_bytes_in_a_cookie_or_csrf_token_are_nobody_not_a_crash() -> None:
    """Found by the console fuzz target: compare_digest raised TypeError on non-ASCII text."""
    a = auth()
    assert a.from_session("0aDCg0.\x80", NOW) is None
    assert a.from_session(a.new_session(OLGA, NOW).rpartition(".")[0] + ".é", NOW) is None
    who = a.from_session(a.new_session(OLGA, NOW), NOW)
    assert who is not None and not a.csrf_ok(who, "é\udcff")
