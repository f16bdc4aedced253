"""One-time login links: a link logs its user in once, before it expires; a used, expired or
forged one is nobody, and only hashes are kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.console.auth import ConsoleUser
from goodput.console.login_link import LINK_TTL, MAX_LINKS, LoginLinks

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ADMIN = ConsoleUser(name="admin", role="admin", token="a" * 24)


def test_a_link_logs_in_once() -> None:
    links = LoginLinks()
    token = links.issue(ADMIN, NOW)
    assert links.redeem(token, NOW + timedelta(minutes=1)) == ADMIN
    assert links.redeem(token, NOW + timedelta(minutes=1)) is None


def test_an_expired_forged_or_odd_token_is_nobody() -> None:
    links = LoginLinks()
    token = links.issue(ADMIN, NOW)
    assert links.redeem(token, NOW + LINK_TTL + timedelta(seconds=1)) is None
    assert links.outstanding() == 0  # spent even though refused
    live = links.issue(ADMIN, NOW)
    for forged in (live[:-1], live + "x", "", "\udcff" * 10, "x" * 10_000):
        assert links.redeem(forged, NOW) is None
    assert links.redeem(live, NOW) == ADMIN


def test_only_hashes_are_kept_and_the_store_is_bounded() -> None:
    links = LoginLinks()
    tokens = [links.issue(ADMIN, NOW) for _ in range(MAX_LINKS * 3)]
    assert links.outstanding() == MAX_LINKS
    assert not any(token in repr(vars(links)) for token in tokens)
    assert links.redeem(tokens[0], NOW) is None  # the oldest was forgotten first
    assert links.redeem(tokens[-1], NOW) == ADMIN
