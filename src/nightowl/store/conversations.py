"""Conversations and their messages, numbered by a per-conversation sequence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, bindparam, column, func, insert, select, update, values
from sqlalchemy.orm import Session

from nightowl.store.changes import Change, record_change, record_changes
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.push import plan_pushes
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Message, utcnow

KINDS = ("direct", "group")
ROLES = ("user", "agent", "notice")
TRUST_LEVELS = ("owner", "member", "untrusted", "agent")


@dataclass(frozen=True)
class ConversationInfo:
    """A conversation as clients see it."""

    id: str
    owner_id: str
    kind: str
    channel: str
    external_key: str | None
    title: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    read_seq: int = 0


@dataclass(frozen=True)
class MessageInfo:
    """A stored message as clients see it."""

    id: str
    conversation_id: str
    seq: int
    author_id: str | None
    role: str
    body: str
    client_id: str | None
    trust: str
    turn_id: str | None
    created_at: datetime
    meta: dict[str, Any]
    # The server's own key for it (outbox, notices, helpers, channel answers): never a
    # client's id, and not shown to clients.
    server_key: str | None = None


_MESSAGE_FIELDS = tuple(MessageInfo.__dataclass_fields__)


def conversation_info(row: Conversation) -> ConversationInfo:
    """The client-facing view of a conversation row."""
    return view_of(ConversationInfo, row)


def message_info(row: Message) -> MessageInfo:
    """The client-facing view of a message row."""
    return view_of(MessageInfo, row, meta=dict(row.meta or {}))


def create_conversation(
    session: Session,
    owner_id: str,
    *,
    kind: str = "direct",
    channel: str = "web",
    external_key: str | None = None,
    title: str = "",
) -> ConversationInfo:
    """Start a new conversation owned by `owner_id`."""
    if kind not in KINDS:
        raise Invalid(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    row = Conversation(
        id=new_id("conv"),
        owner_id=owner_id,
        kind=kind,
        channel=channel,
        external_key=external_key,
        title=title,
    )
    session.add(row)
    session.flush()
    return conversation_info(row)


_COLUMNS = (
    Conversation.id,
    Conversation.owner_id,
    Conversation.kind,
    Conversation.channel,
    Conversation.external_key,
    Conversation.title,
    Conversation.last_seq,
    Conversation.created_at,
    Conversation.updated_at,
    Conversation.read_seq,
)


def get_conversation(session: Session, conversation_id: str, user_id: str) -> ConversationInfo:
    """The conversation, if it exists and belongs to `user_id`; otherwise NotFound."""
    row = session.execute(select(*_COLUMNS).where(Conversation.id == conversation_id)).first()
    if row is None or row.owner_id != user_id:
        raise NotFound(f"no conversation {conversation_id!r}")
    return ConversationInfo(**row._asdict())


def find_conversation(session: Session, conversation_id: str) -> ConversationInfo:
    """The conversation by id, whoever owns it (for the server's own use)."""
    row = session.get(Conversation, conversation_id)
    if row is None:
        raise NotFound(f"no conversation {conversation_id!r}")
    return conversation_info(row)


def owner_of(session: Session, conversation_id: str) -> str | None:
    """The user a conversation belongs to (None: no such conversation)."""
    return session.scalar(_OWNER_OF, {"conversation_id": conversation_id})


_OWNER_OF = select(Conversation.owner_id).where(Conversation.id == bindparam("conversation_id"))


def kind_of(session: Session, conversation_id: str) -> str | None:
    """A conversation's kind: direct, group or helper (None: no such conversation)."""
    return session.scalar(select(Conversation.kind).where(Conversation.id == conversation_id))


def conversation_exists(session: Session, conversation_id: str) -> bool:
    """Whether the conversation is in the store."""
    return session.get(Conversation, conversation_id) is not None


def list_conversations(session: Session, user_id: str) -> list[ConversationInfo]:
    """The user's conversations, most recently active first."""
    rows = session.scalars(
        select(Conversation)
        .where(Conversation.owner_id == user_id, Conversation.kind != "helper")
        .order_by(Conversation.updated_at.desc())
    )
    return [conversation_info(row) for row in rows]


def latest_conversation_id(session: Session, user_id: str) -> str | None:
    """The user's most recently active conversation (not a helper's), if any: where a notice
    that arises outside any conversation reaches them."""
    return session.scalar(
        select(Conversation.id)
        .where(Conversation.owner_id == user_id, Conversation.kind != "helper")
        .order_by(Conversation.updated_at.desc())
        .limit(1)
    )


def find_by_client_id(session: Session, conversation_id: str, client_id: str) -> MessageInfo | None:
    """The message a client already sent with this id, if any."""
    row = session.scalar(
        select(Message).where(
            Message.conversation_id == conversation_id, Message.client_id == client_id
        )
    )
    return None if row is None else message_info(row)


def find_by_server_key(session: Session, conversation_id: str, key: str) -> MessageInfo | None:
    """The message the server already stored under this key, if any."""
    row = session.scalar(_BY_SERVER_KEY, {"conversation_id": conversation_id, "key": key})
    return None if row is None else message_info(row)


# Prebuilt: every message the agent sends looks for its key first.
_BY_SERVER_KEY = select(Message).where(
    Message.conversation_id == bindparam("conversation_id"), Message.server_key == bindparam("key")
)


_BUMP_SEQ = (
    update(Conversation)
    .where(Conversation.id == bindparam("conversation_id"))
    .values(last_seq=Conversation.last_seq + bindparam("count"), updated_at=bindparam("now"))
    .returning(Conversation.last_seq, Conversation.owner_id)
)
_INSERT_MESSAGE = insert(Message)


@dataclass(frozen=True)
class NewMessage:
    """A message to append (see `append_messages`)."""

    role: str
    body: str
    trust: str
    author_id: str | None = None
    client_id: str | None = None
    turn_id: str | None = None
    meta: dict[str, Any] | None = None
    message_id: str | None = None
    server_key: str | None = None


def append_messages(
    session: Session, conversation_id: str, new: list[NewMessage]
) -> list[MessageInfo]:
    """Add messages at the conversation's next `seq`s, in order; announce them after commit.

    Bumping `last_seq` locks the conversation row, so concurrent writers of one conversation
    queue up and sequence numbers have no gaps and no repeats. One notification covers them
    all (clients fetch everything after the seq they have).
    """
    _validate(new)
    if not new:
        return []
    now = utcnow()
    # Prebuilt Core statements on the session's connection: this is the hot path of every
    # message, and building statements (or the ORM's unit of work) costs more than running them.
    connection = session.connection()
    bumped = connection.execute(
        _BUMP_SEQ, {"conversation_id": conversation_id, "count": len(new), "now": now}
    ).one_or_none()
    if bumped is None:
        raise NotFound(f"no conversation {conversation_id!r}")
    last_seq, owner_id = bumped
    messages = _messages(conversation_id, new, last_seq, now)
    connection.execute(_INSERT_MESSAGE, [message.__dict__ for message in messages])
    # Whatever deserves a push gets its deliveries in this transaction (store/push.py). The
    # many-conversations path below carries only arrivals (router batches), never pushed.
    pushed = plan_pushes(session, owner_id, messages)
    record_change(
        session,
        Change(
            conversation_id=conversation_id,
            owner_id=owner_id,
            seq=last_seq,
            kind="notify" if _important(new) else "message",
            pushed=pushed,
        ),
    )
    return messages


def _validate(new: list[NewMessage]) -> None:
    for item in new:
        if item.role not in ROLES:
            raise Invalid(f"role must be one of {', '.join(ROLES)}, not {item.role!r}")
        if item.trust not in TRUST_LEVELS:
            raise Invalid(f"trust must be one of {', '.join(TRUST_LEVELS)}, not {item.trust!r}")
        if item.client_id is not None and item.server_key is not None:
            raise Invalid("a message is keyed by its client's id or by the server, not both")


def _important(new: list[NewMessage]) -> bool:
    # An important message (e.g. from background work) asks clients to raise a notification.
    return any((item.meta or {}).get("important") for item in new)


def _messages(
    conversation_id: str, new: list[NewMessage], last_seq: int, now: datetime
) -> list[MessageInfo]:
    """The new messages, numbered up to `last_seq` (the bumped sequence)."""
    return [
        MessageInfo(
            id=item.message_id or new_id("msg"),
            conversation_id=conversation_id,
            seq=last_seq - len(new) + 1 + n,
            author_id=item.author_id,
            role=item.role,
            body=item.body,
            client_id=item.client_id,
            trust=item.trust,
            turn_id=item.turn_id,
            created_at=now,
            meta=item.meta or {},
            server_key=item.server_key,
        )
        for n, item in enumerate(new)
    ]


def append_to_conversations(
    session: Session, new: dict[str, list[NewMessage]]
) -> dict[str, list[MessageInfo]]:
    """`append_messages` for several conversations; on PostgreSQL in a handful of statements
    whatever their number: lock their rows (in id order, so concurrent writers cannot
    deadlock), bump every sequence at once, insert every message at once, announce them in
    one go."""
    new = {conversation: items for conversation, items in new.items() if items}
    connection = session.connection()
    if len(new) <= 1 or connection.dialect.name != "postgresql":
        # SQLite has no VALUES list in UPDATE … FROM, and its statements cost microseconds.
        return {c: append_messages(session, c, items) for c, items in new.items()}
    for items in new.values():
        _validate(items)
    now = utcnow()
    ids = sorted(new)
    connection.execute(
        select(Conversation.id)
        .where(Conversation.id.in_(ids))
        .order_by(Conversation.id)
        .with_for_update()
    )
    counts = values(column("id", String), column("count", Integer), name="counts").data(
        [(conversation, len(new[conversation])) for conversation in ids]
    )
    bumped = {
        row.id: (row.last_seq, row.owner_id)
        for row in connection.execute(
            update(Conversation)
            .where(Conversation.id == counts.c.id)
            .values(last_seq=Conversation.last_seq + counts.c.count, updated_at=now)
            .returning(Conversation.id, Conversation.last_seq, Conversation.owner_id)
        )
    }
    missing = [conversation for conversation in ids if conversation not in bumped]
    if missing:
        raise NotFound(f"no conversation {missing[0]!r}")
    stored: dict[str, list[MessageInfo]] = {}
    for conversation in ids:
        last_seq, _ = bumped[conversation]
        stored[conversation] = _messages(conversation, new[conversation], last_seq, now)
    connection.execute(
        _INSERT_MESSAGE, [m.__dict__ for conversation in ids for m in stored[conversation]]
    )
    record_changes(
        session,
        [
            Change(
                conversation_id=conversation,
                owner_id=bumped[conversation][1],
                seq=bumped[conversation][0],
                kind="notify" if _important(new[conversation]) else "message",
            )
            for conversation in ids
        ],
    )
    return stored


def append_message(
    session: Session,
    conversation_id: str,
    *,
    role: str,
    body: str,
    trust: str,
    author_id: str | None = None,
    client_id: str | None = None,
    turn_id: str | None = None,
    meta: dict[str, Any] | None = None,
    message_id: str | None = None,
    server_key: str | None = None,
) -> MessageInfo:
    """Add one message at the conversation's next `seq` (see `append_messages`): `client_id`
    is a client's id for it, `server_key` the server's own key (never both)."""
    item = NewMessage(
        role, body, trust, author_id, client_id, turn_id, meta, message_id, server_key
    )
    return append_messages(session, conversation_id, [item])[0]


def messages_after(
    session: Session, conversation_id: str, after: int, limit: int = 500
) -> list[MessageInfo]:
    """Messages with `seq > after`, oldest first, at most `limit`."""
    rows = session.execute(
        select(*(getattr(Message, f) for f in _MESSAGE_FIELDS))
        .where(Message.conversation_id == conversation_id, Message.seq > after)
        .order_by(Message.seq)
        .limit(limit)
    )
    return [MessageInfo(**row._asdict()) for row in rows]


def mark_read(session: Session, conversation_id: str, user_id: str, seq: int) -> int:
    """The owner has read up to `seq` (on some device); the read position never moves back."""
    conversation = get_conversation(session, conversation_id, user_id)
    seq = min(seq, conversation.last_seq)
    moved = session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.read_seq < seq)
        .values(read_seq=seq)
    )
    if getattr(moved, "rowcount", 0):
        # The owner's other devices clear their unread markers on this (no message content).
        record_change(
            session,
            Change(conversation_id=conversation_id, owner_id=user_id, seq=seq, kind="read"),
        )
    return max(seq, conversation.read_seq)


def unread_counts(session: Session, conversations: list[ConversationInfo]) -> dict[str, int]:
    """Messages not written by the owner after each conversation's read position."""
    ids = [c.id for c in conversations if c.last_seq > c.read_seq]
    if not ids:
        return {}
    rows = session.execute(
        select(Message.conversation_id, func.count())
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            Message.conversation_id.in_(ids),
            Message.seq > Conversation.read_seq,
            Message.trust != "owner",
        )
        .group_by(Message.conversation_id)
    ).all()
    return {row[0]: int(row[1]) for row in rows}


def previews(session: Session, conversations: list[ConversationInfo]) -> dict[str, str]:
    """The first line of each conversation's newest message (at most 140 characters)."""
    ids = [c.id for c in conversations if c.last_seq > 0]
    if not ids:
        return {}
    rows = session.execute(
        select(Message.conversation_id, Message.body)
        .join(
            Conversation,
            (Conversation.id == Message.conversation_id) & (Message.seq == Conversation.last_seq),
        )
        .where(Message.conversation_id.in_(ids))
    ).all()
    found: dict[str, str] = {}
    for conversation_id, body in rows:
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        found[conversation_id] = lines[0][:140] if lines else ""
    return found


def title_if_untitled(session: Session, conversation_id: str, text: str) -> None:
    """Name an untitled conversation after its first line (as chat apps do)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    title = line if len(line) <= 80 else line[:79].rstrip() + "…"
    session.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.title == "")
        .values(title=title)
    )


def recent_exchanges(
    session: Session, conversation_id: str, limit: int = 200
) -> tuple[list[str], list[str]]:
    """What the agent told the conversation's owner lately, across all of their
    conversations, and what people asked in them (the newest `limit` messages)."""
    owner = select(Conversation.owner_id).where(Conversation.id == conversation_id)
    rows = session.execute(
        select(Message.role, Message.body)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Conversation.owner_id == owner.scalar_subquery())
        .where(Message.role.in_(("user", "agent")))
        .order_by(Message.created_at.desc())
        .limit(limit)
    ).all()
    said = [body for role, body in rows if role == "agent"]
    asked = [body for role, body in rows if role == "user"]
    return said, asked
