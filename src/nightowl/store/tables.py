"""The app store's tables. Every change to them lands as an Alembic migration."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# A number that grows with use (sequence numbers, row ids): 64-bit everywhere. SQLite's integers
# are 64-bit already, and only its `INTEGER PRIMARY KEY` spelling autoincrements.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base of every app-store table."""

    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON}


class User(Base):
    """A person: the owner of this server, or someone the owner added (a member)."""

    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))  # owner | member
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AccessToken(Base):
    """A bearer token; only its SHA-256 hash is stored."""

    __tablename__ = "access_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Conversation(Base):
    """A thread of messages; `last_seq` is the newest message's sequence number."""

    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("channel", "external_key", name="uq_conversation_thread"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # direct | group
    channel: Mapped[str] = mapped_column(String(32))  # web, cli, slack, email, webhook, ...
    external_key: Mapped[str | None] = mapped_column(String(300), default=None)
    title: Mapped[str] = mapped_column(String(300), default="")
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    # How far the owner has read (on any device): messages after it count as unread.
    read_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    # When the provider cache was last warmed for it (the owner was typing).
    warmed_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Message(Base):
    """One message of a conversation, numbered by a per-conversation `seq`."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_message_seq"),
        UniqueConstraint("conversation_id", "client_id", name="uq_message_client_id"),
        Index("uq_message_server_key", "conversation_id", "server_key", unique=True),
        Index("ix_messages_unclaimed", "conversation_id", "turn_id"),
        Index("ix_messages_created", "created_at"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    author_id: Mapped[str | None] = mapped_column(String(64), default=None)
    role: Mapped[str] = mapped_column(String(16))  # user | agent | notice
    body: Mapped[str] = mapped_column(Text)
    # Two namespaces, so neither can take the other's key: `client_id` is what a client sent
    # (the API's idempotency id), `server_key` what the server made (the outbox's
    # `out:turn:call`, a notice's `guard:turn`, a helper's `task:run`, a channel event's
    # `channel:event`).
    client_id: Mapped[str | None] = mapped_column(String(200), default=None)
    server_key: Mapped[str | None] = mapped_column(String(300), default=None)
    trust: Mapped[str] = mapped_column(String(16))  # owner | member | untrusted
    # For a user message: the turn that took it (NULL until one does).
    # For an agent message: the turn that sent it.
    turn_id: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Attachments, controls (buttons, draft) and the notify flag of an agent message.
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # For a question (buttons or a draft): the message that answered it, once one did.
    answer_id: Mapped[str | None] = mapped_column(String(64), default=None)


class Trigger(Base):
    """Anything that woke the agent; (source, idempotency_key) makes redelivery harmless."""

    __tablename__ = "triggers"
    __table_args__ = (UniqueConstraint("source", "idempotency_key", name="uq_trigger_key"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    source: Mapped[str] = mapped_column(String(32))
    idempotency_key: Mapped[str] = mapped_column(String(300))
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    message_id: Mapped[str | None] = mapped_column(String(64), default=None)
    status: Mapped[str] = mapped_column(String(16), default="accepted")  # accepted | processed


class Turn(Base):
    """One run of the agent loop over a batch of a conversation's messages (= a workflow)."""

    __tablename__ = "turns"
    __table_args__ = (Index("ix_turns_conversation_status", "conversation_id", "status"),)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # the workflow id
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))  # queued | running | done | failed
    priority: Mapped[int] = mapped_column(Integer)
    batch_first_seq: Mapped[int | None] = mapped_column(BigInteger, default=None)
    batch_last_seq: Mapped[int | None] = mapped_column(BigInteger, default=None)
    activity: Mapped[str] = mapped_column(String(200), default="")
    # The question (message id) the turn's workflow is waiting to hear an answer to.
    waiting_on: Mapped[str | None] = mapped_column(String(64), default=None)
    # The routine whose firing this turn answers (its spending counts against the routine).
    routine_id: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # Starts of the turn's workflow (first run and recoveries) since it last made progress:
    # how many times in a row a process died while it ran (engine/parking.py).
    starts_without_progress: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class Worker(Base):
    """A server process; its heartbeat tells the others whether to take over its turns."""

    __tablename__ = "workers"
    executor_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # alive | dead
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    recovered_by: Mapped[str | None] = mapped_column(String(200), default=None)
    recovered_at: Mapped[datetime | None] = mapped_column(default=None)


class TranscriptEntry(Base):
    """One item of what the model saw and said (its private text included), in order."""

    __tablename__ = "transcript_entries"
    __table_args__ = (
        UniqueConstraint("conversation_id", "entry_key", name="uq_transcript_key"),
        Index("ix_transcript_order", "conversation_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    turn_id: Mapped[str] = mapped_column(String(200), index=True)
    # Derived from the step that wrote it, so a re-run step replaces rather than repeats.
    entry_key: Mapped[str] = mapped_column(String(300))
    payload: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelCall(Base):
    """One executed model call (a crashed-and-retried step shows up twice) with its usage."""

    __tablename__ = "model_calls"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    turn_id: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(300))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # USD by the price table; None for a model the table has no price for.
    cost_usd: Mapped[float | None] = mapped_column(Float, default=None)
    # [name, hash] of every section of the request, in order (see harness/sections.py).
    sections: Mapped[list[list[Any]] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # The first section that differed from the conversation's previous request, if any.
    cache_break: Mapped[str | None] = mapped_column(String(300), default=None)
    cache_break_explained: Mapped[bool | None] = mapped_column(default=None)
    # The prefix-cache meter (any model): the request's estimated tokens, and how many of them
    # lead with what the conversation sent within the cache lifetime.
    meter_prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    meter_prefix_tokens: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)


class ToolRun(Base):
    """One executed tool call (a crashed-and-retried step shows up twice)."""

    __tablename__ = "tool_runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    turn_id: Mapped[str] = mapped_column(String(200), index=True)
    call_id: Mapped[str] = mapped_column(String(200))
    # The step this run belongs to ("<turn>:tool:<step>.<index>"): a run of the same step that
    # started and never finished means an earlier attempt died while the tool ran.
    step_key: Mapped[str | None] = mapped_column(String(300), index=True, default=None)
    tool: Mapped[str] = mapped_column(String(100))
    effect: Mapped[str] = mapped_column(String(16))
    is_error: Mapped[bool] = mapped_column(default=False)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class Helper(Base):
    """A helper: a sub-agent with a conversation of its own (its transcript), working for a
    parent conversation; each task it is given is a run (a workflow and a `turns` row)."""

    __tablename__ = "helpers"
    __table_args__ = (Index("ix_helpers_parent", "parent_conversation_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    parent_conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    # Its own transcript, pin and budget: a conversation of kind "helper", shown to nobody.
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"), unique=True)
    name: Mapped[str | None] = mapped_column(String(100), default=None)
    kind: Mapped[str] = mapped_column(String(16))  # general | computer | isolated
    status: Mapped[str] = mapped_column(String(16))  # queued | running | done | failed | stopped
    task: Mapped[str] = mapped_column(Text)  # the current task, as given
    run_id: Mapped[str] = mapped_column(String(200))  # the current task's workflow id
    runs: Mapped[int] = mapped_column(Integer, default=1)
    progress: Mapped[str] = mapped_column(String(300), default="")  # its last step, in words
    report: Mapped[str | None] = mapped_column(Text, default=None)
    report_trust: Mapped[str] = mapped_column(String(16), default="agent")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class StepResult(Base):
    """What a durable step that writes to the store returned, committed in the same
    transaction as its writes: a re-run of the step (the process died before DBOS recorded
    it) returns this instead of doing its work again."""

    __tablename__ = "step_results"
    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    result: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OutputBlob(Base):
    """A large tool output kept in the blob store: whose it is and the trust of its source
    (reading it back with read_output carries that trust; another user cannot read it)."""

    __tablename__ = "output_blobs"
    owner_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reference: Mapped[str] = mapped_column(String(80), primary_key=True)
    trust: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Webhook(Base):
    """An inbound webhook: deliveries signed with its secret enter its conversation."""

    __tablename__ = "webhooks"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    # Kept as is: verifying an HMAC needs the secret itself (it is shown to the owner once).
    secret: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookSignature(Base):
    """A signed delivery seen within the signature window: the same signed body may come back
    only as a retry of the same delivery, never as another one (a replay)."""

    __tablename__ = "webhook_signatures"
    hook_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)  # of "<timestamp>.<body>"
    delivery: Mapped[str] = mapped_column(String(200))
    seen_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Routine(Base):
    """A scheduled prompt ("every weekday at 8:00, summarise …") that wakes its conversation."""

    __tablename__ = "routines"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    cron: Mapped[str] = mapped_column(String(100))
    timezone: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20))  # pending_approval | active | paused
    created_by: Mapped[str] = mapped_column(String(16))  # owner | member | agent
    # The trust its firings carry: owner, or untrusted when the agent proposed it in a turn
    # that read outside text (approving it does not change that); a member's fire as the
    # member's (store/routines.routine_trust).
    trust: Mapped[str] = mapped_column(String(16), default="owner")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_fired_at: Mapped[datetime | None] = mapped_column(default=None)
    # What happens to due times that passed while it could not run: latest | all | none
    # (harness/firings.py), and the newest due time that has an outcome.
    catch_up: Mapped[str] = mapped_column(String(8), default="latest", server_default="latest")
    accounted_until: Mapped[datetime | None] = mapped_column(default=None)
    # A check that runs without the model before each firing (harness/watches.py: kind and
    # target), and what it saw last (None until its first check).
    watch: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    watch_state: Mapped[str | None] = mapped_column(Text, default=None)
    # What done means for a run (harness/done_when.py), checked when the run's turn ends.
    done_when: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    # Whether it runs inside its owner's quiet hours: run | skip (harness/firings.py).
    quiet_hours: Mapped[str] = mapped_column(String(8), default="run", server_default="run")


class RoutineFiring(Base):
    """One due time of a routine and its outcome: pending (being run), ran, skipped, failed."""

    __tablename__ = "routine_firings"
    __table_args__ = (UniqueConstraint("routine_id", "due_at", name="uq_routine_firing_due"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    routine_id: Mapped[str] = mapped_column(ForeignKey("routines.id", ondelete="CASCADE"))
    due_at: Mapped[datetime] = mapped_column()
    outcome: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    # A `latest` catch-up: how many missed due times it stands for; `late`: fired after its time.
    missed: Mapped[int] = mapped_column(Integer, default=0)
    late: Mapped[bool] = mapped_column(default=False)
    message_id: Mapped[str | None] = mapped_column(String(64), default=None)
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)


class Computer(Base):
    """A user's sandbox: the host uid it runs as and its last snapshot (deep sleep)."""

    __tablename__ = "computers"
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    uid: Mapped[int] = mapped_column(Integer, unique=True)
    # "awake": the home is on disk; "asleep": it lives only in the snapshot.
    state: Mapped[str] = mapped_column(String(16), default="awake")
    snapshot: Mapped[str | None] = mapped_column(String(80), nullable=True)
    snapshot_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    snapshot_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # With a computer tier: the host it is awake on, for as long as that host renews the lease
    # (a dead host's computers wake elsewhere, from their last snapshot, once it lapses).
    host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    host_until: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PromptPinRow(Base):
    """A conversation's pinned prompt (instructions, catalogue, schemas) until compaction."""

    __tablename__ = "prompt_pins"
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    pin: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Compaction(Base):
    """A compacted history: entries up to `through_entry_id` are replaced by `entry` (the
    summary and the latest user-facing messages) in what the model sees."""

    __tablename__ = "compactions"
    __table_args__ = (Index("ix_compactions_conversation", "conversation_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    through_entry_id: Mapped[int] = mapped_column(BigInteger)
    entry: Mapped[dict[str, Any]] = mapped_column()
    model_call_id: Mapped[str | None] = mapped_column(String(64), default=None)
    tokens_before: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Timer(Base):
    """A wake-up set with `set_timer` (the workflow does the waking; this row lets the server
    see what will wake a conversation, and when: those due in the future are pending)."""

    __tablename__ = "timers"
    __table_args__ = (Index("ix_timers_conversation", "conversation_id", "due_at"),)
    id: Mapped[str] = mapped_column(String(300), primary_key=True)  # the timer's workflow id
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    due_at: Mapped[datetime] = mapped_column()
    note: Mapped[str] = mapped_column(Text)


class AuditEvent(Base):
    """One entry of the safety audit log: a review, decision, approval, denial or send."""

    __tablename__ = "audit_events"
    __table_args__ = (
        UniqueConstraint("event_key", name="uq_audit_event_key"),
        Index("ix_audit_owner_id", "owner_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # Derived from the step that wrote it, so a re-run step never logs twice.
    event_key: Mapped[str] = mapped_column(String(300))
    owner_id: Mapped[str] = mapped_column(String(64))
    conversation_id: Mapped[str] = mapped_column(String(64))
    turn_id: Mapped[str] = mapped_column(String(200))
    # reviewed | approval_requested | approved | denied | timed_out | blocked | draft | sent
    # | discarded | send_failed
    kind: Mapped[str] = mapped_column(String(32))
    tool: Mapped[str] = mapped_column(String(100))
    effect: Mapped[str] = mapped_column(String(16))
    decision: Mapped[str] = mapped_column(String(16))  # allow | block | hold | done | ...
    reason: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class SecretRow(Base):
    """A secret of the owner's vault, encrypted at rest (only its name is ever shown)."""

    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_secret_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    ciphertext: Mapped[str] = mapped_column(Text)
    # Where the secret may be sent without the owner's approval (safety/destinations.py).
    allowed_hosts: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class SendRecord(Base):
    """An irreversible send (message, e-mail, payment): its intent is stored before the
    provider is called, so a crash in between is checked with the provider, never repeated."""

    __tablename__ = "sends"
    idempotency_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(64), index=True)
    conversation_id: Mapped[str] = mapped_column(String(64))
    turn_id: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str] = mapped_column(String(100))
    payload: Mapped[dict[str, Any]] = mapped_column()
    status: Mapped[str] = mapped_column(String(16))  # intent | sent | failed
    provider_id: Mapped[str | None] = mapped_column(String(200), default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(default=None)


class PushSubscription(Base):
    """A device that takes Web Push for its user (the browser's PushSubscription)."""

    __tablename__ = "push_subscriptions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    endpoint: Mapped[str] = mapped_column(String(1000), unique=True)
    p256dh: Mapped[str] = mapped_column(String(200))  # the device's public key (base64url)
    auth: Mapped[str] = mapped_column(String(100))  # its authentication secret (base64url)
    device: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_sent_at: Mapped[datetime | None] = mapped_column(default=None)


class PushDelivery(Base):
    """One push of one message to one device: decided in the transaction that stored the
    message, sent once by the push sender (channels/webpush.py)."""

    __tablename__ = "push_deliveries"
    __table_args__ = (Index("ix_push_deliveries_due", "status", "not_before"),)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)  # "<message>:<subscription>"
    message_id: Mapped[str] = mapped_column(String(64), index=True)
    subscription_id: Mapped[str] = mapped_column(
        ForeignKey("push_subscriptions.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[str] = mapped_column(String(64))
    urgent: Mapped[bool] = mapped_column(default=False)  # a deadline: goes through quiet hours
    # pending | sent | dropped (answered or read first) | failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[datetime] = mapped_column(default=utcnow)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(default=None)


class PushSettings(Base):
    """A user's push preferences: quiet hours (only deadlines come through) and whether a
    push may carry message text (a push service is a third party: off by default)."""

    __tablename__ = "push_settings"
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    quiet_start: Mapped[str | None] = mapped_column(String(5), default=None)  # "22:00"
    quiet_end: Mapped[str | None] = mapped_column(String(5), default=None)  # "07:00"
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    include_text: Mapped[bool] = mapped_column(default=False)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
