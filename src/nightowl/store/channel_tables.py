"""The channel tables: each user's configured channels (e-mail, Matrix) with their durable
resume position, which conversations each channel is bound to, the external ids that thread
inbound events into conversations, and one delivery record per (agent message, channel)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from nightowl.store.tables import Base, BigId, utcnow


class ChannelRow(Base):
    """A channel a user configured: its kind, its settings (never a secret: credentials are
    named vault secrets), where its listener resumes, and how it fared last."""

    __tablename__ = "channels"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_channel_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(16))  # email | matrix
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Where the listener resumes (IMAP UIDVALIDITY and last UID; a Matrix sync token).
    position: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="new")  # new | ok | failed
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The worker whose listener runs (one at a time across workers), until its lease lapses.
    listener: Mapped[str | None] = mapped_column(String(200), default=None)
    listener_until: Mapped[datetime | None] = mapped_column(default=None)


class ChannelBinding(Base):
    """A conversation shown on a channel: where on it (a room, a mail thread) and the last
    `seq` the relay has planned deliveries up to."""

    __tablename__ = "channel_bindings"
    __table_args__ = (UniqueConstraint("channel_id", "conversation_id", name="uq_channel_binding"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel_id: Mapped[str] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    # The channel's own address of the thread: {"room_id": …} or {"to": […], "subject": …}.
    address: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    planned_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A channel with `alerts` on carries the owner's other conversations' important messages
    # only (approvals, questions: store/channel_alerts.py), to the owner's own chat.
    alerts_only: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ChannelThreadRef(Base):
    """An external id (a mail's Message-ID) known to belong to a conversation: inbound mail
    that refers to it (In-Reply-To, References) joins that conversation."""

    __tablename__ = "channel_thread_refs"
    __table_args__ = (UniqueConstraint("channel_id", "external_id", name="uq_channel_ref"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    channel_id: Mapped[str] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(300))
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))


class ChannelDelivery(Base):
    """One agent message on one channel: pending → sending → sent (or failed), with retries."""

    __tablename__ = "channel_deliveries"
    __table_args__ = (
        UniqueConstraint("message_id", "channel_id", name="uq_channel_delivery"),
        Index("ix_channel_deliveries_due", "state", "next_at"),
        Index("ix_channel_deliveries_external", "channel_id", "external_id"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel_id: Mapped[str] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    binding_id: Mapped[str] = mapped_column(ForeignKey("channel_bindings.id", ondelete="CASCADE"))
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    message_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(BigInteger)  # the message's: a thread's go out in order
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending|sending|sent|failed
    attempts: Mapped[int] = mapped_column(BigInteger, default=0)
    next_at: Mapped[datetime] = mapped_column(default=utcnow)
    # While sending: when the claim lapses (a relay that died mid-send leaves it to lapse).
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    error: Mapped[str] = mapped_column(Text, default="")
    external_id: Mapped[str | None] = mapped_column(String(300), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(default=None)
