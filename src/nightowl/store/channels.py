"""Channels in the store: configuration and resume position, conversations threaded by
external ids, and the delivery records the outbound relay works through."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nightowl.store.channel_alerts import alert_worthy
from nightowl.store.channel_tables import (
    ChannelBinding,
    ChannelDelivery,
    ChannelRow,
    ChannelThreadRef,
)
from nightowl.store.conversations import create_conversation
from nightowl.store.errors import Conflict, Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Message, utcnow

KINDS = ("email", "matrix", "slack", "telegram")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass(frozen=True)
class ChannelInfo:
    """A configured channel (its settings name vault secrets; they hold none)."""

    id: str
    owner_id: str
    name: str
    kind: str
    settings: dict[str, Any]
    position: dict[str, Any]
    status: str
    error: str
    created_at: datetime
    updated_at: datetime
    listener: str = ""  # the worker listening on it ("" while none holds the lease)


def _info(row: ChannelRow) -> ChannelInfo:
    return view_of(
        ChannelInfo,
        row,
        settings=dict(row.settings or {}),
        position=dict(row.position or {}),
        listener=row.listener or "",
    )


def add_channel(
    session: Session, owner_id: str, name: str, kind: str, settings: dict[str, Any]
) -> ChannelInfo:
    """Configure a channel for `owner_id` (Conflict when the name is taken)."""
    if kind not in KINDS:
        raise Invalid(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not _NAME.match(name):
        raise Invalid("a channel name must be 1-40 lowercase letters, digits, '_' or '-'")
    exists = session.scalar(
        select(ChannelRow.id).where(ChannelRow.owner_id == owner_id, ChannelRow.name == name)
    )
    if exists is not None:
        raise Conflict(f"there is already a channel named {name!r}")
    row = ChannelRow(
        id=new_id("chn"),
        owner_id=owner_id,
        name=name,
        kind=kind,
        settings=settings,
        position={},
        status="new",
        error="",
    )
    session.add(row)
    session.flush()
    return _info(row)


def list_channels(session: Session, owner_id: str | None = None) -> list[ChannelInfo]:
    """The owner's channels (everyone's when `owner_id` is None), oldest first."""
    query = select(ChannelRow).order_by(ChannelRow.created_at)
    if owner_id is not None:
        query = query.where(ChannelRow.owner_id == owner_id)
    return [_info(row) for row in session.scalars(query)]


def channel_named(session: Session, owner_id: str, name: str) -> ChannelInfo:
    """The owner's channel by name (NotFound otherwise)."""
    row = session.scalar(
        select(ChannelRow).where(ChannelRow.owner_id == owner_id, ChannelRow.name == name)
    )
    if row is None:
        raise NotFound(f"no channel named {name!r}")
    return _info(row)


def get_channel(session: Session, channel_id: str) -> ChannelInfo:
    """A channel by id (NotFound otherwise)."""
    row = session.get(ChannelRow, channel_id)
    if row is None:
        raise NotFound(f"no channel {channel_id!r}")
    return _info(row)


def remove_channel(session: Session, owner_id: str, name: str) -> None:
    """Forget a channel; its conversations stay (no longer bound to it)."""
    channel = channel_named(session, owner_id, name)
    session.execute(delete(ChannelDelivery).where(ChannelDelivery.channel_id == channel.id))
    session.execute(delete(ChannelBinding).where(ChannelBinding.channel_id == channel.id))
    session.execute(delete(ChannelThreadRef).where(ChannelThreadRef.channel_id == channel.id))
    session.execute(delete(ChannelRow).where(ChannelRow.id == channel.id))


def save_position(session: Session, channel_id: str, position: dict[str, Any]) -> None:
    """Where the channel's listener resumes after a restart."""
    session.execute(
        update(ChannelRow)
        .where(ChannelRow.id == channel_id)
        .values(position=position, updated_at=utcnow())
    )


def set_status(session: Session, channel_id: str, status: str, error: str = "") -> None:
    """How the channel fared last (ok, or failed with what went wrong)."""
    session.execute(
        update(ChannelRow)
        .where(ChannelRow.id == channel_id)
        .values(status=status, error=error[:2000], updated_at=utcnow())
    )


# -- threads: external thread key or refs -> conversation ---------------------------------


@dataclass(frozen=True)
class Thread:
    """The conversation an inbound event belongs to."""

    conversation_id: str
    kind: str  # direct | group
    created: bool


def _insert_ignore(
    session: Session, table: Any, rows: list[dict[str, Any]], keys: list[str]
) -> None:
    if not rows:
        return
    dialect = postgresql if session.connection().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(table).on_conflict_do_nothing(index_elements=keys), rows)


def remember_refs(
    session: Session, channel_id: str, conversation_id: str, external_ids: list[str]
) -> None:
    """These external ids (Message-IDs) belong to the conversation from now on."""
    rows = [
        {"channel_id": channel_id, "external_id": ref[:300], "conversation_id": conversation_id}
        for ref in dict.fromkeys(external_ids)
        if ref
    ]
    _insert_ignore(session, ChannelThreadRef, rows, ["channel_id", "external_id"])


def thread_of(
    session: Session,
    channel: ChannelInfo,
    thread_key: str,
    *,
    kind: str,
    title: str,
    address: dict[str, Any],
    refs: list[str] | None = None,
) -> Thread:
    """The conversation of an inbound event: the one a ref already belongs to, else the one
    of its thread key, else a new one (created on first contact, bound to the channel)."""
    if refs:
        found = session.execute(
            select(ChannelThreadRef.conversation_id, Conversation.kind)
            .join(Conversation, Conversation.id == ChannelThreadRef.conversation_id)
            .where(ChannelThreadRef.channel_id == channel.id)
            .where(ChannelThreadRef.external_id.in_([r[:300] for r in refs]))
            .limit(1)
        ).first()
        if found is not None:
            return Thread(found[0], found[1], created=False)
    external_key = f"{channel.id}:{thread_key}"[:300]
    row = session.execute(
        select(Conversation.id, Conversation.kind).where(
            Conversation.channel == channel.kind, Conversation.external_key == external_key
        )
    ).first()
    if row is not None:
        return Thread(row[0], row[1], created=False)
    conversation = create_conversation(
        session,
        channel.owner_id,
        kind=kind,
        channel=channel.kind,
        external_key=external_key,
        title=title[:300],
    )
    bind(session, channel.id, conversation.id, address)
    return Thread(conversation.id, kind, created=True)


def bind(session: Session, channel_id: str, conversation_id: str, address: dict[str, Any]) -> str:
    """Show the conversation on the channel from its next message on; the binding's id."""
    existing = session.scalar(
        select(ChannelBinding.id).where(
            ChannelBinding.channel_id == channel_id,
            ChannelBinding.conversation_id == conversation_id,
        )
    )
    if existing is not None:  # shown in full from now on (it may have carried alerts only)
        session.execute(
            update(ChannelBinding).where(ChannelBinding.id == existing).values(alerts_only=False)
        )
        return existing
    last_seq = session.scalar(
        select(Conversation.last_seq).where(Conversation.id == conversation_id)
    )
    binding = ChannelBinding(
        id=new_id("bnd"),
        channel_id=channel_id,
        conversation_id=conversation_id,
        address=address,
        planned_seq=last_seq or 0,
    )
    session.add(binding)
    session.flush()
    return binding.id


def readdress(
    session: Session, channel_id: str, conversation_id: str, changes: dict[str, Any]
) -> None:
    """Merge what an inbound event says about the thread (the mail to answer next) into the
    conversation's binding to the channel."""
    binding = session.scalar(
        select(ChannelBinding.id).where(
            ChannelBinding.channel_id == channel_id,
            ChannelBinding.conversation_id == conversation_id,
        )
    )
    if binding is not None:
        update_address(session, binding, changes)


def update_address(session: Session, binding_id: str, changes: dict[str, Any]) -> None:
    """Merge what a delivery learnt about the thread (the last Message-ID sent) into it."""
    row = session.get(ChannelBinding, binding_id)
    if row is not None and changes:
        row.address = {**(row.address or {}), **changes}


# -- the outbound relay's records ---------------------------------------------------------


@dataclass(frozen=True)
class DueDelivery:
    """A delivery claimed for one attempt, with what it carries."""

    id: str
    channel_id: str
    binding_id: str
    conversation_id: str
    message_id: str
    attempts: int  # this one included
    body: str
    meta: dict[str, Any]
    address: dict[str, Any]
    # An earlier attempt's claim lapsed mid-send (a crash): it may have landed already.
    uncertain: bool = False


def plan_deliveries(session: Session) -> int:
    """A delivery record for every agent message of a bound conversation not planned yet;
    how many were made. Runs in one transaction with moving each binding's mark, so every
    message is planned exactly once per channel."""
    bindings = session.execute(
        select(
            ChannelBinding.id,
            ChannelBinding.channel_id,
            ChannelBinding.conversation_id,
            ChannelBinding.planned_seq,
            Conversation.last_seq,
            ChannelBinding.alerts_only,
        )
        .join(Conversation, Conversation.id == ChannelBinding.conversation_id)
        .where(Conversation.last_seq > ChannelBinding.planned_seq)
    ).all()
    made = 0
    now = utcnow()
    for binding_id, channel_id, conversation_id, planned, last, alerts_only in bindings:
        messages = session.execute(
            select(Message.id, Message.seq, Message.meta)
            .where(
                Message.conversation_id == conversation_id,
                Message.seq > planned,
                Message.seq <= last,
                Message.role == "agent",
            )
            .order_by(Message.seq)
        ).all()
        rows = [
            {
                "id": new_id("dlv"),
                "channel_id": channel_id,
                "binding_id": binding_id,
                "conversation_id": conversation_id,
                "message_id": message_id,
                "seq": seq,
                "state": "pending",
                "attempts": 0,
                "next_at": now,
                "error": "",
                "created_at": now,
            }
            for message_id, seq, meta in messages
            if not alerts_only or alert_worthy(meta or {})
        ]
        _insert_ignore(session, ChannelDelivery, rows, ["message_id", "channel_id"])
        made += len(rows)
        session.execute(
            update(ChannelBinding)
            .where(ChannelBinding.id == binding_id, ChannelBinding.planned_seq == planned)
            .values(planned_seq=last)
        )
    return made


def claim_due(
    session: Session, channel_ids: list[str], lease_s: float, limit: int = 50
) -> list[DueDelivery]:
    """Claim deliveries that are due (pending and their time has come, or sending with a
    lapsed claim: a relay died mid-send) for one attempt each. A thread's messages go out in
    order: a delivery is taken only when every earlier one of its binding is taken too."""
    if not channel_ids:
        return []
    now = utcnow()
    query = (
        select(ChannelDelivery)
        .where(ChannelDelivery.channel_id.in_(channel_ids))
        .where(ChannelDelivery.state.in_(("pending", "sending")))
        .order_by(ChannelDelivery.binding_id, ChannelDelivery.seq)
    )
    if session.connection().dialect.name == "postgresql":
        # Another relay claiming now holds whole threads: skip them (skipping single rows
        # could hide a thread's first message and let a later one overtake it).
        free = (
            select(ChannelBinding.id)
            .where(ChannelBinding.channel_id.in_(channel_ids))
            .where(
                select(ChannelDelivery.id)
                .where(
                    ChannelDelivery.binding_id == ChannelBinding.id,
                    ChannelDelivery.state.in_(("pending", "sending")),
                )
                .exists()
            )
            .with_for_update(skip_locked=True)
        )
        held = list(session.scalars(free))
        if not held:
            return []
        query = query.where(ChannelDelivery.binding_id.in_(held))
    taken: list[ChannelDelivery] = []
    blocked: set[str] = set()
    for row in session.scalars(query):
        due = (row.state == "pending" and row.next_at <= now) or (
            row.state == "sending" and row.lease_until is not None and row.lease_until < now
        )
        if row.binding_id in blocked or not due:
            blocked.add(row.binding_id)
            continue
        if len(taken) < limit:
            taken.append(row)
        else:
            blocked.add(row.binding_id)
    due_list = []
    for row in taken:
        uncertain = row.state == "sending"
        row.state, row.attempts = "sending", row.attempts + 1
        row.lease_until = now + timedelta(seconds=lease_s)
        message = session.get(Message, row.message_id)
        binding = session.get(ChannelBinding, row.binding_id)
        if message is None or binding is None:
            row.state, row.error = "failed", "the message or its binding is gone"
            continue
        due_list.append(
            DueDelivery(
                row.id,
                row.channel_id,
                row.binding_id,
                row.conversation_id,
                row.message_id,
                row.attempts,
                message.body,
                dict(message.meta or {}),
                dict(binding.address or {}),
                uncertain,
            )
        )
    session.flush()
    return due_list


def release(session: Session, delivery_ids: list[str]) -> None:
    """Give claimed deliveries back untried (an earlier one of their thread failed)."""
    if delivery_ids:
        session.execute(
            update(ChannelDelivery)
            .where(ChannelDelivery.id.in_(delivery_ids))
            .values(state="pending", attempts=ChannelDelivery.attempts - 1, lease_until=None)
        )


def mark_sent(session: Session, delivery_id: str, external_id: str | None) -> None:
    """The channel has the message (its own id for it, when it gave one)."""
    session.execute(
        update(ChannelDelivery)
        .where(ChannelDelivery.id == delivery_id)
        .values(state="sent", external_id=external_id, sent_at=utcnow(), lease_until=None, error="")
    )


def mark_retry(session: Session, delivery_id: str, error: str, retry_at: datetime | None) -> None:
    """The attempt failed: try again at `retry_at`, or give up (failed) when it is None."""
    values: dict[str, Any] = {"error": error[:2000], "lease_until": None}
    if retry_at is None:
        values["state"] = "failed"
    else:
        values.update(state="pending", next_at=retry_at)
    session.execute(
        update(ChannelDelivery).where(ChannelDelivery.id == delivery_id).values(**values)
    )


def next_due_at(session: Session, channel_ids: list[str]) -> datetime | None:
    """When the earliest pending delivery of these channels comes due."""
    if not channel_ids:
        return None
    return session.scalar(
        select(func.min(ChannelDelivery.next_at)).where(
            ChannelDelivery.channel_id.in_(channel_ids), ChannelDelivery.state == "pending"
        )
    )


def delivery_counts(session: Session, channel_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per channel id: how many deliveries are in each state."""
    counts: dict[str, dict[str, int]] = {c: {} for c in channel_ids}
    if not channel_ids:
        return counts
    for channel_id, state, count in session.execute(
        select(ChannelDelivery.channel_id, ChannelDelivery.state, func.count())
        .where(ChannelDelivery.channel_id.in_(channel_ids))
        .group_by(ChannelDelivery.channel_id, ChannelDelivery.state)
    ):
        counts[channel_id][state] = int(count)
    return counts


def deliveries_of(session: Session, message_id: str) -> list[tuple[str, str, int, str | None]]:
    """(channel id, state, attempts, external id) of each delivery of a message."""
    rows = session.execute(
        select(
            ChannelDelivery.channel_id,
            ChannelDelivery.state,
            ChannelDelivery.attempts,
            ChannelDelivery.external_id,
        ).where(ChannelDelivery.message_id == message_id)
    )
    return [(r[0], r[1], int(r[2]), r[3]) for r in rows]


def delivered_as(session: Session, channel_id: str, external_id: str) -> tuple[str, str] | None:
    """(message id, conversation id) of the agent message the channel knows by this id (a
    reaction names the event it reacts to), or None."""
    row = session.execute(
        select(ChannelDelivery.message_id, ChannelDelivery.conversation_id).where(
            ChannelDelivery.channel_id == channel_id,
            ChannelDelivery.external_id == external_id[:300],
        )
    ).first()
    return (row[0], row[1]) if row is not None else None


def sending(session: Session, channel_id: str) -> bool:
    """Whether a delivery to the channel is being sent now (claimed, lease running): its
    external id is not recorded yet, so a reaction naming it cannot be matched yet."""
    return (
        session.execute(
            select(ChannelDelivery.id)
            .where(
                ChannelDelivery.channel_id == channel_id,
                ChannelDelivery.state == "sending",
                ChannelDelivery.lease_until > utcnow(),
            )
            .limit(1)
        ).first()
        is not None
    )


def claim_listener(session: Session, channel_id: str, worker: str, lease_s: float) -> bool:
    """Take or renew the channel's listener lease for `worker`: True while it is this
    worker's (nobody held it, it held it, or the holder's lease lapsed: a dead worker)."""
    now = utcnow()
    taken = session.execute(
        update(ChannelRow)
        .where(
            ChannelRow.id == channel_id,
            or_(
                ChannelRow.listener.is_(None),
                ChannelRow.listener == worker,
                ChannelRow.listener_until < now,
            ),
        )
        .values(listener=worker, listener_until=now + timedelta(seconds=lease_s))
    )
    return bool(taken.rowcount)  # type: ignore[attr-defined]


def release_listener(session: Session, channel_id: str, worker: str) -> None:
    """Give the lease up (a worker stopping): another worker takes the channel at once."""
    session.execute(
        update(ChannelRow)
        .where(ChannelRow.id == channel_id, ChannelRow.listener == worker)
        .values(listener=None, listener_until=None)
    )
