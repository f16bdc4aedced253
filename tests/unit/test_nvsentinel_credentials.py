"""The NVSentinel receivers' credentials as settings and pure checks: which settings may run a
receiver (none without a credential), static bearer tokens, OAuth client credentials (the event
exporter's way to a bearer token) and TokenReview settings. Served for real in
tests/integration/nvsentinel/test_credentials.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from goodput.detect.nvsentinel import NvSentinelSettings, token_accepted
from tests.unit.nvsentinel_cases import NOW

# -- settings and tokens -----------------------------------------------------------------------------------


def test_settings_refuse_an_exposed_receiver_without_a_token() -> None:
    with pytest.raises(ValueError, match="without a token"):
        NvSentinelSettings(enabled=True, grpc_host="0.0.0.0")
    NvSentinelSettings(enabled=True, grpc_host="0.0.0.0", tokens=("t" * 16,))
    with pytest.raises(ValueError, match="no longer honoured"):
        NvSentinelSettings(enabled=True, http_host="10.0.0.5", allow_unauthenticated=True)
    with pytest.raises(ValueError, match="shorter"):
        NvSentinelSettings(tokens=("short",))
    with pytest.raises(ValueError, match="node name"):
        NvSentinelSettings(node_names={"k8s-a": "bad name"})
    with pytest.raises(ValueError, match="extra"):
        NvSentinelSettings.model_validate({"enabeld": True})


def test_tokens() -> None:
    tokens = ("a" * 20, "b" * 20)
    assert token_accepted(f"Bearer {'b' * 20}", tokens) and token_accepted(f"bearer {'a' * 20}", tokens)
    for header in (None, "", "Bearer", f"Basic {'a' * 20}", "Bearer " + "a" * 19):
        assert not token_accepted(header, tokens)
    assert token_accepted(None, ())


# -- OAuth client credentials (the event exporter's way to a bearer token) -----------------------------


def test_minted_access_tokens_verify_expire_and_die_with_their_secret() -> None:
    from goodput.detect.nvsentinel import access_token_valid, mint_access_token
    clients = {"nvsentinel-exporter": "s" * 32}
    token, ttl = mint_access_token("nvsentinel-exporter", "s" * 32, NOW, 3600)
    assert ttl == 3600 and access_token_valid(token, clients, NOW + timedelta(minutes=59))
    assert not access_token_valid(token, clients, NOW + timedelta(hours=1, seconds=1))
    assert not access_token_valid(token, {"nvsentinel-exporter": "t" * 32}, NOW)  # rotated secret
    client, expiry, mac = token.split(".")
    for forged in (f"{client}.{int(expiry) + 999}.{mac}", f"other.{expiry}.{mac}", f"{client}.{expiry}.{'0' * 64}",
                   "", "...", f"{client}.{expiry}", f"{client}.-1.{mac}"):
        assert not access_token_valid(forged, clients, NOW)


def test_a_non_ascii_mac_is_an_invalid_token_not_a_crash() -> None:
    """`compare_digest` raises TypeError on a non-ASCII str; that was an HTTP 500 for anyone (issue #26)."""
    from goodput.detect.nvsentinel import access_token_valid, mint_access_token
    clients = {"nvsentinel-exporter": "s" * 32}
    client, expiry, _ = mint_access_token("nvsentinel-exporter", "s" * 32, NOW, 3600)[0].split(".")
    for mac in ("é" * 64, "\udcff" * 64, "0" * 63 + "\u0661"):
        assert not access_token_valid(f"{client}.{expiry}.{mac}", clients, NOW)
    assert not access_token_valid(f"{client}.\u0661\u0662\u0663.{'0' * 64}", clients, NOW)  # Arabic-Indic digits


def test_client_credentials_by_basic_auth_or_form() -> None:
    import base64

    from goodput.detect.nvsentinel import client_credentials
    clients = {"exporter": "s" * 32, "other": "o" * 32}
    basic = "Basic " + base64.b64encode(b"exporter:" + b"s" * 32).decode()
    assert client_credentials({}, basic, clients) == "exporter"
    assert client_credentials({"client_id": "other", "client_secret": "o" * 32}, None, clients) == "other"
    for form, header in (({"client_id": "exporter", "client_secret": "o" * 32}, None),
                         ({"client_id": "nobody", "client_secret": "s" * 32}, None),
                         ({"client_id": "exporter"}, None), ({}, "Basic !!!"), ({}, None),
                         ({}, "Basic " + base64.b64encode(b"exporter:wrong").decode())):
        assert client_credentials(form, header, clients) is None


def test_oauth_clients_are_checked_and_protect_only_http() -> None:
    NvSentinelSettings(enabled=True, http_host="10.0.0.5", grpc_enabled=False, oauth_clients={"exporter": "s" * 16})
    with pytest.raises(ValueError, match="without a token"):  # gRPC has no OAuth: it needs a token of its own
        NvSentinelSettings(enabled=True, grpc_host="10.0.0.5", oauth_clients={"exporter": "s" * 16})
    with pytest.raises(ValueError, match="shorter"):
        NvSentinelSettings(oauth_clients={"exporter": "short"})
    with pytest.raises(ValueError, match="client id"):
        NvSentinelSettings(oauth_clients={"bad id": "s" * 16})


def test_no_receiver_runs_without_a_credential_even_on_loopback() -> None:
    """On a head or login node loopback is every local account: a receiver with no credential would
    let any of them drain a node with one forged fatal event (issue #26)."""
    with pytest.raises(ValueError, match="without a token"):
        NvSentinelSettings(enabled=True)
    with pytest.raises(ValueError, match="HTTP receiver"):  # TokenReview guards gRPC only, not the HTTP side
        NvSentinelSettings(enabled=True, token_review={"enabled": True,
                                                       "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
    NvSentinelSettings(enabled=True, http_enabled=False,
                       token_review={"enabled": True, "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
    NvSentinelSettings(enabled=True, grpc_enabled=False, oauth_clients={"exporter": "s" * 16})
    NvSentinelSettings(enabled=True, tokens=("t" * 16,))
    with pytest.raises(ValueError, match="no longer honoured"):  # loopback is not an identity: no way around it
        NvSentinelSettings(enabled=True, allow_unauthenticated=True)


def test_token_review_settings() -> None:
    from goodput.detect.nvsentinel import TokenReviewSettings
    with pytest.raises(ValueError, match="allowed_users"):
        TokenReviewSettings(enabled=True)
    with pytest.raises(ValueError, match="https"):
        TokenReviewSettings(api_url="http://10.0.0.1:6443")
    # a ServiceAccount token is a credential: an exposed gRPC receiver may rely on it alone
    NvSentinelSettings(enabled=True, grpc_host="10.0.0.5", http_enabled=False,
                       token_review={"enabled": True, "allowed_users": ["system:serviceaccount:nvsentinel:pc"]})
