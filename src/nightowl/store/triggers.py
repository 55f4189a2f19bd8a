"""Triggers: anything that woke the agent, stored once per (source, idempotency key).

The router claims a batch's keys first: a key seen before inserts nothing and is not returned
(no exception, no read on the path of a new trigger); a concurrent insert of the same key
waits for the other transaction, then inserts nothing. Statements on this hot path are
prebuilt once per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nightowl.store.conversations import MessageInfo
from nightowl.store.ids import new_id
from nightowl.store.tables import Message, Trigger

# A trigger's key: (source, idempotency key).
TriggerKey = tuple[str, str]


@dataclass(frozen=True)
class NewTrigger:
    """A trigger to store, and the id its message will have if the key is new."""

    source: str
    idempotency_key: str
    conversation_id: str
    message_id: str


def _claim_key(dialect: Any) -> Any:
    return (
        dialect.insert(Trigger)
        .on_conflict_do_nothing(index_elements=[Trigger.source, Trigger.idempotency_key])
        .returning(Trigger.source, Trigger.idempotency_key)
    )


_CLAIM_KEYS = {"sqlite": _claim_key(sqlite), "postgresql": _claim_key(postgresql)}
_MESSAGE_COLUMNS = [getattr(Message, f) for f in MessageInfo.__dataclass_fields__]
_SEEN = (
    select(*_MESSAGE_COLUMNS)
    .join(Trigger, Trigger.message_id == Message.id)
    .where(Trigger.source == bindparam("source"), Trigger.idempotency_key == bindparam("key"))
)


def claim_trigger_keys(
    session: Session, triggers: Sequence[NewTrigger], received_at: datetime
) -> set[TriggerKey]:
    """Store the triggers whose keys are new (`INSERT … ON CONFLICT DO NOTHING RETURNING`, one
    statement); the keys that were (a key stored before, or by a concurrent transaction
    that committed first, is not)."""
    connection = session.connection()
    rows = connection.execute(
        _CLAIM_KEYS[connection.dialect.name],
        [
            {
                "id": new_id("trg"),
                "source": trigger.source,
                "idempotency_key": trigger.idempotency_key,
                "conversation_id": trigger.conversation_id,
                "message_id": trigger.message_id,
                "received_at": received_at,
                "status": "accepted",
            }
            for trigger in triggers
        ],
    )
    return {(row[0], row[1]) for row in rows}


def message_of_trigger(session: Session, source: str, key: str) -> MessageInfo | None:
    """The message of a trigger key stored before (a prebuilt statement)."""
    row = session.connection().execute(_SEEN, {"source": source, "key": key}).first()
    return None if row is None else MessageInfo(**row._asdict())


def messages_of_triggers(
    session: Session, keys: Sequence[TriggerKey]
) -> dict[TriggerKey, MessageInfo]:
    """The messages of trigger keys stored before (one query for them all)."""
    if not keys:
        return {}
    if len(keys) == 1:
        one = message_of_trigger(session, *keys[0])
        return {} if one is None else {keys[0]: one}
    rows = session.connection().execute(
        select(Trigger.source, Trigger.idempotency_key, *_MESSAGE_COLUMNS)
        .join(Message, Trigger.message_id == Message.id)
        .where(tuple_(Trigger.source, Trigger.idempotency_key).in_(list(keys)))
    )
    return {(row[0], row[1]): MessageInfo(*row[2:]) for row in rows}
