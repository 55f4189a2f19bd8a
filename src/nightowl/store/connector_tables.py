"""The connector tables: each user's MCP servers (how to reach them, what the owner decided about
them, the tools they listed last) and which connectors a conversation may use."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from nightowl.store.tables import Base, utcnow


class ConnectorRow(Base):
    """An MCP server a user connected: a command run inside their computer (stdio) or a URL
    (streamable HTTP), with the owner's overrides and the tools it listed last."""

    __tablename__ = "connectors"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_connector_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    transport: Mapped[str] = mapped_column(String(8))  # stdio | http
    command: Mapped[list[str]] = mapped_column(JSON, default=list)  # stdio: argv inside
    url: Mapped[str | None] = mapped_column(Text, default=None)  # http
    # HTTP headers; a value may hold {{secret:NAME}} references (never a secret itself).
    headers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    auth: Mapped[str] = mapped_column(String(8), default="none")  # none | oauth
    description: Mapped[str] = mapped_column(Text, default="")
    # The owner trusts what it returns (otherwise its output is outside text).
    trusted: Mapped[bool] = mapped_column(Boolean, default=False)
    # The owner's effect per tool, over what its annotations say.
    effects: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Whether a sampling request of the server may use the conversation's model.
    sampling: Mapped[bool] = mapped_column(Boolean, default=False)
    # The tools it listed last: [{name, description, schema, annotations}].
    tools: Mapped[list[Any]] = mapped_column(JSON, default=list)
    listed_at: Mapped[datetime | None] = mapped_column(default=None)
    # What the owner approved of each tool (harness/tool_pins.py): null until the first listing
    # pins it; `held`: listed tools that differ from their pin or are new (not offered).
    pinned: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    held: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default="[]")
    # A stdio server's package as pinned at its first start, and one found later that differs
    # (it does not start until the owner approves it): tools/mcp/package_probe.py.
    package: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    package_held: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    status: Mapped[str] = mapped_column(String(16), default="new")  # new | ok | failed | authorize
    error: Mapped[str] = mapped_column(Text, default="")
    # OAuth state that is not secret: client id, token expiry, scope (tokens are in the vault).
    oauth: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ConversationConnectors(Base):
    """The connectors one conversation may use (no row: every connector of its owner)."""

    __tablename__ = "conversation_connectors"
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    names: Mapped[list[str]] = mapped_column(JSON, default=list)
