"""Push endpoint settings and the bearer-token check."""

from __future__ import annotations

import hmac

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from goodput.models import Cluster

MIN_TOKEN_CHARS = 16
MAX_ATTEMPT = 2**31 - 1


class _Settings(BaseModel):
    # Settings, unlike the domain models, forbid unknown keys: a typo in goodput.toml must fail loudly.
    model_config = ConfigDict(frozen=True, extra="forbid")


class PushFields(_Settings):
    """Which record keys carry what; the first key present wins. Dotted names reach nested objects.

    The defaults cover Fluent Bit (`log`, `date`) and Vector (`message`, `host`, `timestamp`)
    records; the job id must be added by the shipper (see docs/log-push.md).
    """

    message: tuple[str, ...] = ("log", "message", "msg")
    job_id: tuple[str, ...] = ("job_id", "slurm_job_id", "SLURM_JOB_ID")
    attempt: tuple[str, ...] = ("job_attempt", "restart_count", "SLURM_RESTART_COUNT")
    host: tuple[str, ...] = ("host", "hostname", "node")
    cluster: tuple[str, ...] = ("cluster",)
    rank: tuple[str, ...] = ("rank", "SLURM_PROCID")
    file: tuple[str, ...] = ("file", "path")
    """The tailed file's path (Fluent Bit's `Path_Key`, Vector's `file`): a record may act on its job
    only when this is the job's own output path as Slurm records it (goodput.diagnose.provenance)."""


class PushConfig(_Settings):
    """The `push` settings: off by default, loopback only, and never without a token."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    tokens: tuple[SecretStr, ...] = ()
    max_body_bytes: int = Field(default=4 << 20, ge=1024, le=256 << 20)
    max_line_chars: int = Field(default=1 << 20, ge=256)
    max_lines_per_batch: int = Field(default=100_000, ge=1)
    max_rejections: int = Field(default=100, ge=1, le=10_000)
    max_streams: int = Field(default=10_000, ge=1)
    max_concurrent_requests: int = Field(default=8, ge=1, le=1024)
    srun_labels: bool = True
    """Split `srun -l` rank prefixes (`  3: text`) off messages whose record has no rank field."""
    clusters: tuple[Cluster, ...] = ()
    """Clusters besides goodput's own that a record's cluster field may name (each must be served)."""
    fields: PushFields = Field(default_factory=PushFields)

    @model_validator(mode="after")
    def _tokens_required(self) -> PushConfig:
        short = [i for i, t in enumerate(self.tokens) if len(t.get_secret_value()) < MIN_TOKEN_CHARS]
        if short:
            raise ValueError(f"push.tokens[{short[0]}] is shorter than {MIN_TOKEN_CHARS} characters")
        if self.enabled and not self.tokens:
            raise ValueError("push.enabled needs at least one token in push.tokens")
        return self


# -- authentication ----------------------------------------------------------------------------


def token_matches(token: str, config: PushConfig) -> bool:
    """Constant time in the token's content, and every configured token is compared."""
    given = token.encode("utf-8", errors="replace")
    found = False
    for accepted in config.tokens:
        found |= hmac.compare_digest(given, accepted.get_secret_value().encode("utf-8", errors="replace"))
    return found and bool(token)


def authenticate(header_value: str | None, config: PushConfig) -> bool:
    """An `Authorization` header value: `Bearer <token>` (the scheme is case-insensitive)."""
    if not header_value:
        return False
    scheme, _, token = header_value.strip().partition(" ")
    return scheme.lower() == "bearer" and token_matches(token.strip(), config)

