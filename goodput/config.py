"""Settings: environment variables (`GOODPUT_*`, nested with `__`) over `goodput.toml` over defaults.

Which goodput.toml, and why a file another user could write is refused: goodput.config_sources.

The defaults are the embedded demo: a Temporal dev server goodput starts itself, on loopback,
with its database under `.goodput/`, a fake scheduler, and monitor mode (recommend, never act).
See docs/configuration.md for every key.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from goodput.config_sources import config_file
from goodput.config_strict import check_known
from goodput.console.auth import ConsoleUser
from goodput.detect.hang import HangConfig
from goodput.detect.node_agent import AgentConfig
from goodput.detect.node_liveness import LivenessConfig
from goodput.detect.nvsentinel import NvSentinelSettings
from goodput.detect.push import PushConfig
from goodput.detect.watch import OptInRule, WatchClusterInput
from goodput.recover.policy import Policy
from goodput.slurm.submit_as import DEFAULT_PATH, BecomeMode


class SchedulerKind(StrEnum):
    FAKE = "fake"
    SLURM_CLI = "slurm-cli"
    SLURM_SSH = "slurm-ssh"
    SLURM_REST = "slurm-rest"
    SLURM_PYSLURM = "slurm-pyslurm"


class SlurmSettings(BaseModel):
    """How to reach Slurm in each deployment mode; see docs/slurm.md."""

    model_config = ConfigDict(extra="forbid")

    command_timeout_s: float = Field(default=30.0, gt=0)
    # SSH mode: a controller off the cluster runs the same commands on a login/head node.
    ssh_host: str = ""
    ssh_port: int = Field(default=22, ge=1, le=65535)
    ssh_user: str | None = None
    ssh_known_hosts: Path = Path("~/.ssh/known_hosts")
    ssh_client_keys: tuple[Path, ...] = ()
    # slurm.conf on the login node when it is not where Slurm looks by default (a login node that
    # serves several clusters): every command there, resubmissions as the owner included, gets it.
    ssh_slurm_conf: str = Field(default="", max_length=4096, pattern=r"^(/[^\x00-\x1f]*)?$")
    # In-cluster REST mode: slurmrestd with a JWT; operations the served API lacks (requeue,
    # resubmission as the owner, exclusions, dependencies) go over SSH when ssh_host is set, else
    # to the local Slurm commands.
    rest_url: str = ""
    rest_user: str = "slurm"
    rest_token_file: Path | None = None
    # The JWT travels in a header: plain http:// is refused unless allowed here (a loopback
    # slurmrestd, the lab). Proxy variables, .netrc and SSL_CERT_* are never read; a private CA
    # is named here instead.
    rest_allow_http: bool = False
    rest_ca_file: Path | None = None
    # Resubmission runs as the job's owner (docs/slurm.md, "How resubmission runs"): how goodput
    # becomes the owner where sbatch runs (auto: runuser as root; sudo: `sudo -n -u OWNER`), and
    # the PATH the copy gets.
    resubmit_as: BecomeMode = BecomeMode.AUTO
    resubmit_path: str = Field(default=DEFAULT_PATH, min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f,]+$")


class TemporalTlsSettings(BaseModel):
    """TLS to a production Temporal cluster: the CA that signs its certificate and, for mTLS, this
    client's certificate and key (PEM files). Temporal Cloud takes an API key instead, or both."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    ca_file: Path | None = None  # None: the system's trust store
    cert_file: Path | None = None
    key_file: Path | None = None
    # When the certificate names another host than the address dialled (a load balancer, an IP).
    server_name: str = Field(default="", max_length=253, pattern=r"^[A-Za-z0-9.\-]*$")

    @model_validator(mode="after")
    def _pair(self) -> TemporalTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("temporal_tls: cert_file and key_file go together (mTLS), or neither")
        return self


class ConsoleSettings(BaseModel):
    """The Recovery Console and /metrics (docs/console.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # Loopback unless the site says otherwise (allow_remote, with users configured, behind TLS).
    host: str = "127.0.0.1"
    port: int = Field(default=8900, ge=0, le=65535)
    allow_remote: bool = False
    # Who may log in and with which role; empty, `goodput up` makes one admin token in
    # <data_dir>/console-admin.token (0600) for the embedded default.
    users: tuple[ConsoleUser, ...] = ()
    # Signs session cookies; every console of a deployment behind one address must share it.
    # Unset, one is generated in <data_dir>/console-session.key.
    session_secret: SecretStr | None = Field(default=None, min_length=32)
    # Where the console's deep links to incidents point; default http://127.0.0.1:<temporal_ui_port>.
    temporal_ui_url: str = ""
    refresh_s: float = Field(default=1.0, gt=0, le=60)
    # Live incident streams one user may hold at once (a browser tab each); more are refused (429).
    max_streams_per_user: int = Field(default=4, ge=1, le=100)
    # Counts per state (one query per state) and the overview pages' 2,000-incident window cost
    # far more than a page of rows at scale (docs/benchmarks.md): they refresh less often.
    counts_refresh_s: float = Field(default=10.0, gt=0, le=600)
    overview_refresh_s: float = Field(default=30.0, gt=0, le=3600)
    # The Goodput page's "GPU-hours saved" compares each recovery with a person doing it by hand
    # in this many minutes (detect, diagnose, drain, resubmit): an estimate, the site's baseline.
    manual_recovery_min: float = Field(default=60.0, gt=0, le=7 * 24 * 60)


class Settings(BaseSettings):
    # hide_input_in_errors: a rejected value may be a token; errors name keys, never values.
    model_config = SettingsConfigDict(env_prefix="GOODPUT_", env_nested_delimiter="__", extra="forbid",
                                      hide_input_in_errors=True)

    cluster: str = "default"
    temporal_address: str = "127.0.0.1:7233"
    namespace: str = "default"
    temporal_tls: TemporalTlsSettings = Field(default_factory=TemporalTlsSettings)
    # Sent as a bearer token on every call (Temporal Cloud API keys); implies TLS.
    temporal_api_key: SecretStr | None = None
    # How long `goodput up` and `goodput worker` wait for a Temporal server that is starting.
    temporal_ready_timeout_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    task_queue: str = "goodput-recovery"
    data_dir: Path = Path(".goodput")
    temporal_ui_port: int = Field(default=8233, ge=1, le=65535)
    temporal_sqlite_wal: bool = True
    scheduler: SchedulerKind = SchedulerKind.FAKE
    # Keys the tokens that mark goodput's resubmitted copies (no job owner can forge one). Every
    # worker of a deployment must share it; unset, one is generated in <data_dir>/resubmit.key.
    # (At least 16 characters, checked where it is used, so that no error message echoes it.)
    resubmit_key: SecretStr | None = None
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    fake_action_delay_s: float = Field(default=0.0, ge=0.0)
    policy: Policy = Field(default_factory=Policy)
    watch: bool = True
    opt_in: OptInRule = Field(default_factory=OptInRule)
    scheduler_poll_s: float = Field(default=2.0, gt=0)
    log_poll_s: float = Field(default=0.25, gt=0)
    # Hang detection's rhythm factor, floor and slow-phase windows (docs/detection.md#hangs).
    hang: HangConfig = Field(default_factory=HangConfig)
    push: PushConfig = Field(default_factory=PushConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    # The agents' heartbeat endpoint and node-loss monitor; docs/gpu-and-logs.md, "Lost nodes".
    liveness: LivenessConfig = Field(default_factory=LivenessConfig)
    # Receive NVSentinel's health events (gRPC platform connector, CloudEvents); docs/nvsentinel.md.
    nvsentinel: NvSentinelSettings = Field(default_factory=NvSentinelSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    # OpenTelemetry metrics (detection latency etc.) exported as JSON; `goodput up` defaults it
    # to <data_dir>/metrics.jsonl.
    metrics_file: Path | None = None
    # Slack-compatible incoming webhook for recommendations, approvals, escalations and outcomes.
    notify_webhook_url: str = ""
    notify_ui_url: str = ""
    metrics_interval_s: float = Field(default=30.0, gt=0)
    # An OTLP/HTTP collector's base URL (`http://collector:4318`): when set, metrics are pushed to
    # <url>/v1/metrics every metrics_interval_s and traces to <url>/v1/traces. Headers (a token),
    # TLS files and timeouts come from the standard OTEL_EXPORTER_OTLP_* environment variables.
    otlp_endpoint: str = Field(default="", pattern=r"^(https?://[^\s/]+(/\S*)?)?$")

    def watch_request(self) -> WatchClusterInput:
        return WatchClusterInput(cluster=self.cluster, opt_in=self.opt_in, poll_interval_s=self.scheduler_poll_s,
                                 log_poll_interval_s=self.log_poll_s, hang=self.hang,
                                 never_restart_exit_codes=self.policy.never_restart_exit_codes)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = config_file()  # which file, and refused if someone else could have written it
        check_known(cls, toml_path, os.environ)  # a typo stops start-up: the models below ignore unknowns
        if toml_path is None:
            return (init_settings, env_settings)
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=toml_path))

    @property
    def temporal_db(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def fake_state_path(self) -> Path:
        return self.data_dir / "fake-cluster.json"

    @property
    def notifications_path(self) -> Path:
        return self.data_dir / "notifications.jsonl"

    @property
    def audit_path(self) -> Path:
        """The append-only audit log of actions and decisions (activities.adapters.audit)."""
        return self.data_dir / "audit.jsonl"

    def temporal_host_port(self) -> tuple[str, int]:
        host, _, port = self.temporal_address.rpartition(":")
        return host or "127.0.0.1", int(port)
