"""Alerts: a channel with the setting `alerts: true` carries every important message of its
owner's conversations, wherever they started (the web app, another channel), to the owner's
own chat on it, so an approval can be answered from the phone with the web app closed.

Each such conversation gets an alerts-only binding the first time the relay sees it (its
address is empty: the channel sends to the owner), planned from the channel's creation on,
so each important message goes out once and nothing from before the channel was added.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nightowl.store.channel_tables import ChannelBinding, ChannelRow
from nightowl.store.ids import new_id
from nightowl.store.tables import Conversation, Message


def alert_worthy(meta: dict[str, Any]) -> bool:
    """An important message: marked so (store/conversations.py), or one asking the owner
    something (an approval, a question, a draft to confirm)."""
    controls = meta.get("controls") or {}
    return bool(meta.get("important") or controls.get("buttons") or "draft" in controls)


def bind_for_alerts(session: Session) -> int:
    """Alerts-only bindings for the conversations of each alerts channel's owner that have
    none yet; how many were made."""
    made = 0
    channels = session.execute(
        select(ChannelRow.id, ChannelRow.owner_id, ChannelRow.created_at, ChannelRow.settings)
    ).all()
    for channel_id, owner_id, created_at, settings in channels:
        if (settings or {}).get("alerts") is not True:
            continue
        bound = select(ChannelBinding.conversation_id).where(
            ChannelBinding.channel_id == channel_id
        )
        new = session.scalars(
            select(Conversation.id).where(
                Conversation.owner_id == owner_id,
                Conversation.kind != "helper",
                Conversation.updated_at >= created_at,
                Conversation.id.not_in(bound),
            )
        ).all()
        for conversation_id in new:
            before = session.scalar(
                select(func.max(Message.seq)).where(
                    Message.conversation_id == conversation_id, Message.created_at < created_at
                )
            )
            # Another worker's relay may bind it at the same moment: the first one wins.
            dialect = postgresql if session.connection().dialect.name == "postgresql" else sqlite
            session.execute(
                dialect.insert(ChannelBinding)
                .values(
                    id=new_id("bnd"),
                    channel_id=channel_id,
                    conversation_id=conversation_id,
                    address={},
                    planned_seq=before or 0,
                    alerts_only=True,
                )
                .on_conflict_do_nothing(index_elements=["channel_id", "conversation_id"])
            )
            made += 1
    return made
