"""The single entry point of every trigger: dedupe, store, wake the conversation's queue."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nightowl.router.priority import Priority
from nightowl.store.conversations import MessageInfo, append_message
from nightowl.store.database import Database
from nightowl.store.ids import new_id
from nightowl.store.tables import Message, Trigger, utcnow
from nightowl.store.turns import TurnInfo, queue_turn, running_turn_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingMessage:
    """A trigger that carries a message for a conversation."""

    source: str
    idempotency_key: str
    conversation_id: str
    text: str
    trust: str
    priority: Priority
    author_id: str | None = None
    client_id: str | None = None
    role: str = "user"  # "notice" for the runtime's own wake-ups (timers)


@dataclass(frozen=True)
class Accepted:
    """What became of a trigger: its stored message, and whether it had been seen before."""

    message: MessageInfo
    duplicate: bool


class ConversationQueue(Protocol):
    """Runs a conversation's turns one at a time (the engine implements it)."""

    def wake(self, turn: TurnInfo, delay_s: float = 0.0) -> None:
        """Make sure this queued turn will run, not before `delay_s` seconds from now."""

    def preempt(self, turn_ids: list[str]) -> None:
        """Stop these running turns at once (the owner cut in)."""


def _claim_key(dialect: Any) -> Any:
    # The trigger row goes in first: a key seen before inserts nothing (no exception, no
    # extra read on the path of a new trigger), and a concurrent insert of the same key waits
    # for the other transaction, then inserts nothing.
    return (
        dialect.insert(Trigger)
        .on_conflict_do_nothing(index_elements=[Trigger.source, Trigger.idempotency_key])
        .returning(Trigger.id)
    )


_CLAIM_KEY = {"sqlite": _claim_key(sqlite), "postgresql": _claim_key(postgresql)}
_SEEN = (
    select(*(getattr(Message, f) for f in MessageInfo.__dataclass_fields__))
    .join(Trigger, Trigger.message_id == Message.id)
    .where(Trigger.source == bindparam("source"), Trigger.idempotency_key == bindparam("key"))
)


class Router:
    """Turns triggers into stored messages and queued turns, each exactly once."""

    def __init__(
        self, database: Database, queue: ConversationQueue, batch_window_s: float = 0.0
    ) -> None:
        self._database = database
        self._queue = queue
        self._batch_window_s = batch_window_s

    def accept(self, incoming: IncomingMessage) -> Accepted:
        """Store the message once (a repeated key returns the original) and wake the queue."""
        message_id = new_id("msg")
        try:
            with self._database.write() as session:
                connection = session.connection()
                claimed = connection.execute(
                    _CLAIM_KEY[connection.dialect.name],
                    {
                        "id": new_id("trg"),
                        "source": incoming.source,
                        "idempotency_key": incoming.idempotency_key,
                        "conversation_id": incoming.conversation_id,
                        "message_id": message_id,
                        "received_at": utcnow(),
                        "status": "accepted",
                    },
                ).first()
                if claimed is None:
                    seen = self._seen(session, incoming)
                    if seen is None:
                        raise RuntimeError(f"trigger {incoming.idempotency_key!r} has no message")
                    return Accepted(seen, duplicate=True)
                message = append_message(
                    session,
                    incoming.conversation_id,
                    role=incoming.role,
                    body=incoming.text,
                    trust=incoming.trust,
                    author_id=incoming.author_id,
                    client_id=incoming.client_id,
                    message_id=message_id,
                )
                turn, created = queue_turn(
                    session, incoming.conversation_id, incoming.priority, already_locked=True
                )
                urgent = incoming.priority == Priority.OWNER_DIRECT
                cut = running_turn_ids(session, incoming.conversation_id) if urgent else []
        except IntegrityError:
            # The same client id under another key (a client reusing its ids): the original.
            with self._database.read() as session:
                seen = self._seen(session, incoming)
            if seen is None:
                raise
            return Accepted(seen, duplicate=True)
        log.info(
            "trigger accepted",
            extra={
                "conversation_id": incoming.conversation_id,
                "turn_id": turn.id,
                "source": incoming.source,
                "seq": message.seq,
            },
        )
        if cut:
            # The owner's direct message is a correction: the running turn stops now and the
            # next one starts with the message and a record of what was cut off.
            self._queue.preempt(cut)
        if created:
            # The owner's direct message starts at once; anything else waits a moment so that
            # a burst (a group thread, a webhook storm) is answered by one turn.
            self._queue.wake(turn, 0.0 if urgent else self._batch_window_s)
        return Accepted(message, duplicate=False)

    @staticmethod
    def _seen(session: Session, incoming: IncomingMessage) -> MessageInfo | None:
        row = (
            session.connection()
            .execute(_SEEN, {"source": incoming.source, "key": incoming.idempotency_key})
            .first()
        )
        return None if row is None else MessageInfo(**row._asdict())
