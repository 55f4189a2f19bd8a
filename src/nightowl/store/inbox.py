"""The owner's inbox: everything that waits on a person, across their conversations.

A view over the store, never a copy: an item is a question a running turn waits on and nobody
answered (a question, an approval whose window is still open, a draft), or a notice the person
has not read yet (a helper's report, a turn that failed or stopped, a budget stop). Answering the
question (on any device, any channel) or reading past the notice takes the item out, because
the next read computes it afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from nightowl.store.conversations import MessageInfo, message_info
from nightowl.store.notices import NOTICE_PREFIXES, notice_kind
from nightowl.store.questions import controls_of
from nightowl.store.tables import Conversation, Message, Trigger, Turn, utcnow

QuestionKind = Literal["approval", "question", "draft"]
NoticeKind = Literal[
    "helper_report",
    "failed_turn",
    "stopped_turn",
    "budget_stop",
    "connector_change",
    "memory_suggestion",
]
InboxKind = Literal[QuestionKind, NoticeKind]
"""What an inbox item is: a kind of question, or a kind of notice."""
QUESTION_KINDS: tuple[str, ...] = get_args(QuestionKind)
NOTICE_KINDS: tuple[str, ...] = get_args(NoticeKind)
KINDS = QUESTION_KINDS + NOTICE_KINDS


@dataclass(frozen=True)
class InboxItem:
    """One thing that waits on the person: its kind, where it is, and when it expires."""

    kind: str
    message: MessageInfo
    conversation_title: str
    deadline: datetime | None

    @property
    def id(self) -> str:
        """The item's id: the message that asks or tells (answers and reads name it)."""
        return self.message.id

    @property
    def link(self) -> str:
        """Where the item lives in the web app."""
        return f"/#c={self.message.conversation_id}&m={self.message.id}"


def question_kind(meta: dict[str, object]) -> str | None:
    """approval | draft | question for a message that asks something, else None."""
    controls = controls_of(dict(meta))
    if not controls:
        return None
    if controls.get("ask") == "approval":
        return "approval"
    if "draft" in controls:
        return "draft"
    return "question"


def deadline_of(meta: dict[str, object]) -> datetime | None:
    """When a question stops taking answers (an approval's window), if it has a deadline."""
    deadline = controls_of(dict(meta)).get("deadline")
    return datetime.fromisoformat(str(deadline)) if deadline else None


def _open_questions(
    session: Session, user_id: str, conversation_id: str | None
) -> list[tuple[Message, str]]:
    query = (
        select(Message, Conversation.title)
        .join(Turn, Turn.waiting_on == Message.id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            Conversation.owner_id == user_id,
            Turn.status == "running",
            Message.answer_id.is_(None),
        )
    )
    if conversation_id is not None:
        query = query.where(Message.conversation_id == conversation_id)
    return [(row[0], row[1]) for row in session.execute(query).all()]


def _unread_notices(
    session: Session, user_id: str, conversation_id: str | None
) -> list[tuple[Message, str, bool]]:
    from_helper = select(Trigger.message_id).where(
        Trigger.source == "helper", Trigger.message_id == Message.id
    )
    keyed = or_(*(Message.server_key.startswith(prefix) for prefix in NOTICE_PREFIXES))
    query = (
        select(Message, Conversation.title, from_helper.exists())
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            Conversation.owner_id == user_id,
            Conversation.kind != "helper",
            Message.role == "notice",
            Message.seq > Conversation.read_seq,
            or_(keyed, and_(Message.server_key.is_(None), from_helper.exists())),
        )
    )
    if conversation_id is not None:
        query = query.where(Message.conversation_id == conversation_id)
    return [(row[0], row[1], bool(row[2])) for row in session.execute(query).all()]


def inbox_items(
    session: Session,
    user_id: str,
    *,
    conversation_id: str | None = None,
    kinds: Iterable[str] | None = None,
) -> list[InboxItem]:
    """What waits on `user_id` now: soonest deadline first, then newest first."""
    wanted = set(kinds or KINDS)
    now = utcnow()
    items: list[InboxItem] = []
    if wanted & set(QUESTION_KINDS):
        for row, title in _open_questions(session, user_id, conversation_id):
            kind = question_kind(row.meta or {})
            deadline = deadline_of(row.meta or {})
            if kind not in wanted or (deadline is not None and deadline <= now):
                continue  # a closed approval window leaves the action blocked: nothing to do
            items.append(InboxItem(kind, message_info(row), title, deadline))
    if wanted & set(NOTICE_KINDS):
        for row, title, from_helper in _unread_notices(session, user_id, conversation_id):
            kind = "helper_report" if from_helper else notice_kind(row.server_key)
            if kind in wanted:
                items.append(InboxItem(kind, message_info(row), title, None))
    later = [i for i in items if i.deadline is None]
    later.sort(key=lambda i: i.message.created_at, reverse=True)
    timed = sorted((i for i in items if i.deadline is not None), key=lambda i: i.deadline or now)
    return timed + later


def still_waiting(session: Session, message_id: str) -> bool:
    """Whether the message still waits on its person: a question nobody answered whose window
    is open, or anything else not yet read (a push for what left is not sent)."""
    row = session.get(Message, message_id)
    if row is None:
        return False
    if question_kind(row.meta or {}) is not None:
        deadline = deadline_of(row.meta or {})
        if row.answer_id is not None or (deadline is not None and deadline <= utcnow()):
            return False
        waiting = select(Turn.id).where(Turn.waiting_on == message_id, Turn.status == "running")
        return session.scalar(waiting.limit(1)) is not None
    read_seq = session.scalar(
        select(Conversation.read_seq).where(Conversation.id == row.conversation_id)
    )
    return row.seq > int(read_seq or 0)
