"""The `nvsentinel` settings table: the receivers, their authentication, TokenReview and push-back.

Everything is off by default; the validators refuse a receiver without a credential (loopback
included: on a head or login node it is every local account), or a part enabled without what it needs.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from goodput.detect.nvsentinel.credentials import _CLIENT_ID, MIN_TOKEN_CHARS
from goodput.identifiers import validate_node_name


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NvSentinelPushBack(_Settings):
    """Sending goodput's own verdicts to NVSentinel (as STORE_ONLY events): off unless configured."""

    enabled: bool = False
    target: str = Field(default="", max_length=512, pattern=r"^[^\s]*$")
    """NVSentinel's platform connector: `unix:///var/run/nvsentinel.sock` or `host:port`."""
    token_file: Path | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    agent: str = Field(default="goodput", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")

    @model_validator(mode="after")
    def _target_needed(self) -> NvSentinelPushBack:
        if self.enabled and not self.target:
            raise ValueError("nvsentinel.push_back.enabled needs nvsentinel.push_back.target")
        return self


class TokenReviewSettings(_Settings):
    """Accept Kubernetes ServiceAccount tokens on the gRPC receiver, validated by the API server's
    TokenReview: what NVSentinel's grpc sink sends when its `tokenPath` is a projected token."""

    enabled: bool = False
    api_url: str = Field(default="https://kubernetes.default.svc", max_length=512, pattern=r"^https?://[^\s/?#]+/?$")
    ca_file: Path | None = None
    """The API server's CA; unset, the system's CAs (in a pod: set it to the service account's ca.crt)."""
    token_file: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    """goodput's own credential for the TokenReview call (re-read on every call: it rotates)."""
    allowed_users: tuple[str, ...] = ()
    """ServiceAccount user names allowed to send events, e.g. `system:serviceaccount:nvsentinel:<sa>`."""
    audiences: tuple[str, ...] = ()
    allow_http: bool = False
    """Accept a plain http:// api_url (a loopback proxy, tests); the tokens travel in its requests."""
    cache_s: float = Field(default=60.0, ge=0, le=3600)
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    reviews_per_s: float = Field(default=2.0, gt=0, le=1000)
    """Reviews of tokens never accepted before, per second: made-up tokens must not each cost an API call."""
    review_burst: int = Field(default=10, ge=1, le=10_000)

    @model_validator(mode="after")
    def _complete(self) -> TokenReviewSettings:
        if self.enabled and not self.allowed_users:
            raise ValueError("nvsentinel.token_review.enabled needs nvsentinel.token_review.allowed_users")
        if self.api_url.startswith("http://") and not self.allow_http:
            raise ValueError("nvsentinel.token_review.api_url must be https:// (or set allow_http)")
        return self


class NvSentinelSettings(_Settings):
    """The `nvsentinel` table: receive NVSentinel's health events (docs/nvsentinel.md). Off by default."""

    enabled: bool = False
    grpc_enabled: bool = True
    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(default=8788, ge=0, le=65535)
    http_enabled: bool = True
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8789, ge=0, le=65535)
    http_path: str = Field(default="/v1/nvsentinel/events", max_length=200, pattern=r"^/[A-Za-z0-9._~/\-]*$")
    tokens: tuple[SecretStr, ...] = ()
    """Accepted bearer tokens (at least 16 characters); NVSentinel's grpc sink sends the one in its tokenPath."""
    token_file: Path | None = None
    """A file holding one more accepted token (the same secret NVSentinel mounts); read at startup."""
    allow_unauthenticated: bool = False
    """Retired: no receiver runs without a credential, loopback or not (on a head node loopback is every
    local account, and a forged fatal event drains a node). Kept as a key only so that a config still
    setting it to true is refused with that reason instead of as an unknown key."""
    oauth_clients: dict[str, SecretStr] = Field(default_factory=dict, max_length=100)
    """OAuth 2.0 client id → client secret: the HTTP receiver also serves a client-credentials token
    endpoint (`oauth_token_path`), so NVSentinel's event exporter (which always fetches its bearer
    token that way) can authenticate against goodput with no identity provider in between."""
    oauth_client_files: dict[str, Path] = Field(default_factory=dict, max_length=100)
    """OAuth 2.0 client id → a file holding its secret (a mounted Secret), read at startup: how the
    Helm chart configures clients, since its ConfigMap must not hold `oauth_clients`' secrets."""
    oauth_token_path: str = Field(default="/v1/nvsentinel/token", max_length=200, pattern=r"^/[A-Za-z0-9._~/\-]*$")
    oauth_token_ttl_s: int = Field(default=3600, ge=60, le=86_400)
    max_message_bytes: int = Field(default=4 << 20, ge=1024, le=64 << 20)
    max_events_per_batch: int = Field(default=1000, ge=1, le=100_000)
    max_concurrent_requests: int = Field(default=16, ge=1, le=1024)
    max_event_age_s: float = Field(default=900.0, gt=0)
    """A fatal event older than this (a late redelivery) is recorded, not pinned on the jobs running now."""
    dedup_window_s: float = Field(default=3600.0, gt=0)
    dedup_max_keys: int = Field(default=10_000, ge=1, le=10_000_000)
    evidence_per_node: int = Field(default=20, ge=0, le=1000)
    evidence_max_nodes: int = Field(default=10_000, ge=1, le=1_000_000)
    evidence_max_age_s: float = Field(default=86_400.0, gt=0)
    node_names: dict[str, str] = Field(default_factory=dict, max_length=100_000)
    """NVSentinel (Kubernetes) node name → Slurm node name, where they differ."""
    token_review: TokenReviewSettings = Field(default_factory=TokenReviewSettings)
    push_back: NvSentinelPushBack = Field(default_factory=NvSentinelPushBack)

    @field_validator("node_names")
    @classmethod
    def _slurm_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value.values():
            validate_node_name(name)
        return value

    @field_validator("oauth_client_files")
    @classmethod
    def _client_files(cls, value: dict[str, Path]) -> dict[str, Path]:
        for client_id in value:
            if not _CLIENT_ID.match(client_id):
                raise ValueError(f"oauth client id {client_id[:40]!r}: use 1-64 of A-Z a-z 0-9 _ . -")
        return value

    @field_validator("oauth_clients")
    @classmethod
    def _clients(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for client_id, secret in value.items():
            if not _CLIENT_ID.match(client_id):
                raise ValueError(f"oauth client id {client_id[:40]!r}: use 1-64 of A-Z a-z 0-9 _ . -")
            if len(secret.get_secret_value()) < MIN_TOKEN_CHARS:
                raise ValueError(f"the secret of oauth client {client_id!r} is shorter than {MIN_TOKEN_CHARS} "
                                 "characters")
        return value

    @model_validator(mode="after")
    def _safe(self) -> NvSentinelSettings:
        short = [i for i, t in enumerate(self.tokens) if len(t.get_secret_value()) < MIN_TOKEN_CHARS]
        if short:
            raise ValueError(f"nvsentinel.tokens[{short[0]}] is shorter than {MIN_TOKEN_CHARS} characters")
        if set(self.oauth_clients) & set(self.oauth_client_files):
            raise ValueError("an OAuth client is in both nvsentinel.oauth_clients and nvsentinel.oauth_client_files")
        if self.http_path == self.oauth_token_path:
            raise ValueError("nvsentinel.http_path and nvsentinel.oauth_token_path must differ")
        if self.allow_unauthenticated:
            raise ValueError("nvsentinel.allow_unauthenticated is no longer honoured: every NVSentinel receiver "
                             "needs a credential (tokens, token_file, oauth_clients or token_review); remove the key")
        if not self.enabled:
            return self
        if not (self.grpc_enabled or self.http_enabled):
            raise ValueError("nvsentinel.enabled needs grpc_enabled or http_enabled")
        for receiver, host in self.unprotected():
            raise ValueError(f"the NVSentinel {receiver} receiver would listen on {host} without a token: loopback is "
                             "every local account, not an identity; set nvsentinel.tokens or nvsentinel.token_file"
                             + (" or nvsentinel.oauth_clients" if receiver == "HTTP" else
                                " or nvsentinel.token_review") + " (or disable it: nvsentinel."
                             + ("http_enabled" if receiver == "HTTP" else "grpc_enabled") + " = false)")
        return self

    def unprotected(self) -> list[tuple[str, str]]:
        """The enabled receivers no credential protects, as (receiver, host). gRPC takes the shared
        tokens or TokenReview; HTTP the shared tokens or OAuth clients (TokenReview guards gRPC only)."""
        shared = bool(self.tokens) or self.token_file is not None
        return [(receiver, host) for receiver, host, on, protected in (
            ("gRPC", self.grpc_host, self.grpc_enabled, shared or self.token_review.enabled),
            ("HTTP", self.http_host, self.http_enabled, shared or bool(self.oauth_clients or self.oauth_client_files)))
            if on and not protected]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
