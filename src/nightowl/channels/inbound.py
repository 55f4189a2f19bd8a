"""Inbound events from a channel become triggers: identity → trust, thread → conversation,
then the router (dedupe by the channel's event id, batching, priorities), then the position.

The position is stored only after the router has stored the events: a crash in between
redelivers them, and the router drops what it has seen.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from pathlib import Path
from typing import Any

from nightowl.channels.base import Inbound, is_owner
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.channels import (
    ChannelInfo,
    readdress,
    remember_refs,
    save_position,
    set_status,
    thread_of,
)
from nightowl.store.conversations import title_if_untitled
from nightowl.store.database import Database
from nightowl.store.errors import Conflict
from nightowl.store.questions import answer_in_words, controls_of, open_question

log = logging.getLogger(__name__)


MAX_TEXT_CHARS = 32_000


def storable(text: str) -> str:
    """Text any store takes: no NUL (PostgreSQL refuses it), no lone surrogates, bounded (a
    huge mail is cut, saying so)."""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n\n[cut: {len(text) - MAX_TEXT_CHARS:,} more characters]"
    return text


def owners_of(settings: dict[str, Any]) -> list[str]:
    """The external identities a channel's settings name as the owner's."""
    owner = settings.get("owner") or []
    return [owner] if isinstance(owner, str) else [str(o) for o in owner]


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip()).strip("._") or "file"
    return cleaned[-100:]


class ChannelInbox:
    """Stores a channel's inbound events through the router, then its resume position."""

    def __init__(self, database: Database, router: Router, homes_dir: Path | None = None) -> None:
        self._database = database
        self._router = router
        self._homes_dir = homes_dir

    def _save_files(self, channel: ChannelInfo, event: Inbound) -> str:
        """Received files go to the owner's home (`~/inbox/`), where the agent's tools read
        them; what the message says about them."""
        if not event.files or self._homes_dir is None:
            return ""
        inbox = self._homes_dir / channel.owner_id / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        prefix = hashlib.sha256(f"{channel.id}:{event.event_id}".encode()).hexdigest()[:8]
        saved = []
        for n, (name, _, data) in enumerate(event.files):
            path = inbox / f"{prefix}-{n}-{_safe_name(name)}"
            path.write_bytes(data)
            path.chmod(0o644)
            saved.append(f"~/inbox/{path.name} ({len(data):,} bytes)")
        return "\n\n(files received, saved as: " + ", ".join(saved) + ")"

    async def accept(
        self, channel: ChannelInfo, events: list[Inbound], position: dict[str, Any]
    ) -> list[str]:
        """Store the events (each once) and then the position; their conversation ids."""
        conversations = await asyncio.to_thread(self._accept, channel, events, position)
        return conversations

    def _accept(
        self, channel: ChannelInfo, events: list[Inbound], position: dict[str, Any]
    ) -> list[str]:
        owners = owners_of(channel.settings)
        conversations = []
        for event in events:
            owner = event.verified and is_owner(event.sender, owners)
            if not event.direct and not event.addressed:
                continue  # a group chat the agent was not addressed in
            with self._database.write() as session:
                thread = thread_of(
                    session,
                    channel,
                    event.thread_key,
                    kind="direct" if event.direct else "group",
                    title=storable(event.title)[:300],
                    address=event.address,
                    refs=event.refs,
                )
                remember_refs(session, channel.id, thread.conversation_id, [*event.refs])
                if not thread.created and event.address:
                    readdress(session, channel.id, thread.conversation_id, event.address)
                if event.title:
                    title_if_untitled(session, thread.conversation_id, storable(event.title))
            if owner and self._answered(channel, thread.conversation_id, event):
                conversations.append(thread.conversation_id)
                continue
            trust = "owner" if owner else "untrusted"
            said = storable(event.text if owner else _outside(event))
            text = said + self._save_files(channel, event)
            urgent = owner and event.direct
            accepted = self._router.accept(
                IncomingMessage(
                    source=channel.kind,
                    idempotency_key=f"{channel.id}:{event.event_id}"[:300],
                    conversation_id=thread.conversation_id,
                    text=text,
                    trust=trust,
                    priority=Priority.OWNER_DIRECT if urgent else Priority.GROUP,
                    author_id=channel.owner_id if owner else None,
                )
            )
            log.info(
                "channel event accepted",
                extra={
                    "channel": channel.name,
                    "conversation_id": thread.conversation_id,
                    "duplicate": accepted.duplicate,
                },
            )
            conversations.append(thread.conversation_id)
        with self._database.write() as session:
            save_position(session, channel.id, position)
            set_status(session, channel.id, "ok")
        return conversations

    def _answered(self, channel: ChannelInfo, conversation_id: str, event: Inbound) -> bool:
        """The owner's reply answers the question the conversation waits on ("Approve", a
        button's label, "send" or "discard" for a draft): stored as the answer, once."""
        with self._database.read() as session:
            question = open_question(session, conversation_id)
        if question is None:
            return False
        answer = answer_in_words(controls_of(question.meta), event.text)
        if answer is None:
            return False
        try:
            self._router.answer(
                conversation_id,
                question.id,
                answer,
                client_id=f"{channel.id}:{event.event_id}"[:200],
                author_id=channel.owner_id,
            )
        except Conflict:  # closed or answered meanwhile: the reply is an ordinary message
            return False
        return True


def _outside(event: Inbound) -> str:
    """Someone else's words, saying who sent them (the prompt fences them as outside text)."""
    who = f"{event.sender_name} <{event.sender}>" if event.sender_name else event.sender
    subject = f"\nSubject: {event.title}" if event.title else ""
    return f"From: {who}{subject}\n\n{event.text}"
