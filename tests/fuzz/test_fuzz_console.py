"""Hostile console input: any query string is a valid filter or a `FilterError` (never a crash,
never a value outside its grammar in the visibility query), and any cookie is a session or
nobody. Anyone who can reach the console can send these, logged in or not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.console.filters import FilterError, IncidentFilter
from tests.fuzz.harness import rejects_cleanly
from workers.console.backend import visibility_query

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

NOW = datetime(2026, 12, 1, tzinfo=UTC)
KEYS = ["state", "mode", "category", "cluster", "partition", "node", "job", "since", "open", "page_size", "page"]
GOOD = ["awaiting-approval", "autonomous", "gpu-hardware", "eos", "gpu", "node07", "123_4", "24h", "1", "100",
        "2026-11-30T10:00:00", "' OR '1'='1", "\x00", "é", "9" * 40]
AUTH = TokenAuthenticator((ConsoleUser(name="olga", role="operator", token="o" * 24),), b"k" * 32)
COOKIE = AUTH.new_session(AUTH.user_for_token("o" * 24) or ConsoleUser(name="x", role="viewer", token="x" * 16),
                          NOW)
values = st.one_of(st.sampled_from(GOOD), st.text(max_size=60))


@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=len(KEYS)))
def test_console_filters(params: dict[str, str]) -> None:
    flt = rejects_cleanly("console-filter", lambda: IncidentFilter.from_params(params), (FilterError,))
    if flt is None:
        return
    query = visibility_query(flt, NOW)
    # Every quoted value came through its grammar: no quote, backslash or control byte inside.
    for value in query.split("'")[1::2]:
        assert not any(ch in value for ch in "\\\"\x00\n") and len(value) <= 128, query


cookies = st.one_of(
    st.text(max_size=200),
    st.builds(lambda cut, tail: COOKIE[:cut] + tail, st.integers(0, len(COOKIE)), st.text(max_size=20)),
    st.builds(lambda flip: COOKIE[:flip] + ("A" if COOKIE[flip] != "A" else "B") + COOKIE[flip + 1:],
              st.integers(0, len(COOKIE) - 1)),
)


@given(cookies)
def test_console_session_cookies(cookie: str) -> None:
    who = rejects_cleanly("console-session", lambda: AUTH.from_session(cookie, NOW), ())
    assert who is None or cookie == COOKIE
