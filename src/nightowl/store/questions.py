"""Questions the agent asks (buttons or an editable draft) and their answers, exactly once.

A turn that asks records the question it waits on (`turns.waiting_on`). The first answer from
any device is stored as a message of its own (so every device syncs it like any other) and
marked on the question; a second answer, or an answer after the turn stopped waiting, is a
Conflict. The database is the source of truth; the wake-up sent to the workflow is only a nudge.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nightowl.store.conversations import (
    MessageInfo,
    append_message,
    find_by_client_id,
    find_by_server_key,
    message_info,
)
from nightowl.store.errors import Conflict, Invalid, NotFound
from nightowl.store.tables import Message, Turn, utcnow
from nightowl.store.turns import lock_conversation, set_activity

QUESTION_STATES = ("open", "answered", "closed")


@dataclass(frozen=True)
class Answered:
    """The stored answer message and the turn waiting for it; `duplicate` on a retried request."""

    message: MessageInfo
    turn_id: str
    duplicate: bool


def controls_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The question part of a message's meta (`{}` for a plain message)."""
    controls = meta.get("controls") or {}
    return controls if isinstance(controls, dict) else {}


def is_answered(session: Session, question_id: str) -> bool:
    """Whether the question has its answer."""
    row = session.get(Message, question_id)
    return row is not None and row.answer_id is not None


def wait_for_answer(session: Session, turn_id: str, message_id: str, activity: str) -> None:
    """The turn now waits on this question; clients show `activity` meanwhile."""
    session.execute(update(Turn).where(Turn.id == turn_id).values(waiting_on=message_id))
    set_activity(session, turn_id, activity)


def validate_answer(controls: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The answer in its stored form, or Invalid saying what this question accepts."""
    buttons = controls.get("buttons") or []
    if buttons:
        value = answer.get("value")
        labels = {b["value"]: b["label"] for b in buttons}
        if value not in labels:
            choices = ", ".join(repr(v) for v in labels)
            raise Invalid(f"value must be one of the question's buttons: {choices}")
        return {"value": value, "label": labels[value]}
    if "draft" in controls:
        action = answer.get("action")
        if action == "discard":
            return {"action": "discard"}
        if action == "send":
            text = answer.get("text")
            if text is None:
                text = controls["draft"]
            if not isinstance(text, str) or not text.strip():
                raise Invalid("text is empty; edit the draft or send it as it is (omit text)")
            return {"action": "send", "text": text}
        raise Invalid("action must be 'send' (with the edited text) or 'discard'")
    raise Invalid("this message asks nothing; only messages with buttons or a draft take answers")


def _same_answer(session: Session, question_id: str, stored: Any, answer: dict[str, Any]) -> bool:
    """Whether `answer` is the one stored (a retry), in the form the question stores it."""
    question = session.get(Message, question_id)
    controls = controls_of(question.meta or {}) if question is not None else {}
    try:
        return bool(validate_answer(controls, answer) == stored)
    except Invalid:
        return False


def _answer_text(answer: dict[str, Any]) -> str:
    if "label" in answer:
        return str(answer["label"])
    if answer["action"] == "send":
        return f"Send:\n{answer['text']}"
    return "Discard"


def answer_question(
    session: Session,
    conversation_id: str,
    question_id: str,
    *,
    answer: dict[str, Any],
    client_id: str | None = None,
    server_key: str | None = None,
    author_id: str,
) -> Answered:
    """Store the owner's answer to an open question, keyed by the client's id (the API) or by
    the server's (a channel event): a retried key returns the first answer; the same key
    with another answer, or used for another message, is a conflict."""
    if (client_id is None) == (server_key is None):
        raise Invalid("an answer is keyed by its client's id or by the server's key")
    lock_conversation(session, conversation_id)
    if client_id is not None:
        earlier = find_by_client_id(session, conversation_id, client_id)
        named = f"client_id {client_id!r}"
    else:
        earlier = find_by_server_key(session, conversation_id, server_key or "")
        named = f"the key {server_key!r}"
    if earlier is not None:
        if earlier.meta.get("answer_to") != question_id:
            raise Conflict(f"{named} was already used for another message", code="client_id_reused")
        if not _same_answer(session, question_id, earlier.meta.get("answer"), answer):
            raise Conflict(
                f"{named} was already used for a different answer to this question; "
                "a retry sends the same answer, a new answer needs a new id",
                code="client_id_reused",
            )
        return Answered(earlier, earlier.turn_id or "", duplicate=True)
    question = session.get(Message, question_id)
    if question is None or question.conversation_id != conversation_id:
        raise NotFound(f"no message {question_id!r} in this conversation")
    controls = controls_of(question.meta or {})
    stored = validate_answer(controls, answer)
    if question.answer_id is not None:
        raise Conflict("this question was already answered (perhaps on another device)")
    deadline = controls.get("deadline")
    if deadline and utcnow() > datetime.fromisoformat(str(deadline)):
        raise Conflict("the approval window closed; the action stays blocked. Ask the agent again")
    turn = session.get(Turn, question.turn_id) if question.turn_id else None
    if turn is None or turn.status != "running" or turn.waiting_on != question_id:
        raise Conflict(
            "this question is closed: the conversation moved on without it. Send a message instead."
        )
    reply = append_message(
        session,
        conversation_id,
        role="user",
        body=_answer_text(stored),
        trust="owner",
        author_id=author_id,
        client_id=client_id,
        server_key=server_key,
        turn_id=turn.id,  # taken by the waiting turn, never by a new one
        meta={"answer_to": question_id, "answer": stored},
    )
    question.answer_id = reply.id
    set_activity(session, turn.id, "thinking")
    return Answered(reply, turn.id, duplicate=False)


def take_answer(session: Session, turn_id: str, question_id: str) -> dict[str, Any] | None:
    """Stop waiting on the question; its answer, or None when it closed unanswered."""
    session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.waiting_on == question_id)
        .values(waiting_on=None)
    )
    answer_id = session.scalar(select(Message.answer_id).where(Message.id == question_id))
    if answer_id is None:
        return None
    reply = session.get(Message, answer_id)
    return None if reply is None else dict((reply.meta or {}).get("answer") or {})


def question_states(session: Session, questions: list[MessageInfo]) -> dict[str, str]:
    """open | answered | closed for each message that asks something."""
    asking = [m for m in questions if controls_of(m.meta)]
    if not asking:
        return {}
    answered = dict(
        session.execute(
            select(Message.id, Message.answer_id).where(Message.id.in_([m.id for m in asking]))
        ).all()
    )
    waited_on = set(
        session.scalars(
            select(Turn.waiting_on).where(
                Turn.waiting_on.in_([m.id for m in asking]), Turn.status == "running"
            )
        )
    )
    return {
        m.id: "answered" if answered.get(m.id) else "open" if m.id in waited_on else "closed"
        for m in asking
    }


def open_question(session: Session, conversation_id: str) -> MessageInfo | None:
    """The question a running turn of the conversation waits on, unanswered, if any."""
    row = session.scalars(
        select(Message)
        .join(Turn, Turn.waiting_on == Message.id)
        .where(
            Message.conversation_id == conversation_id,
            Message.answer_id.is_(None),
            Turn.status == "running",
        )
        .order_by(Message.seq.desc())
        .limit(1)
    ).first()
    return None if row is None else message_info(row)


def answer_in_words(controls: dict[str, Any], text: str) -> dict[str, Any] | None:
    """The answer a plain reply gives (a button's label or value; "send" or "discard" for a
    draft), or None when the reply is no answer."""
    said = text.strip().splitlines()[0].strip(" *_.!\"'`").casefold() if text.strip() else ""
    for button in controls.get("buttons") or []:
        if said in (str(button["label"]).casefold(), str(button["value"]).casefold()):
            return {"value": button["value"]}
    if "draft" in controls and said in ("send", "discard"):
        return {"action": said}
    return None


# Reactions that answer (channels.md): keycaps pick the nth button; a yes or a no picks the
# button whose value is "approve" / "deny". A draft (an irreversible send or payment) is sent
# only by a check mark, never by a thumbs-up, which people give in passing.
KEYCAPS = [f"{n}\ufe0f\u20e3" for n in range(1, 7)]  # 1️⃣ … 6️⃣
_CHECK = {"\u2705", "\u2714\ufe0f", "\u2714"}  # check marks
_CROSS = {"\u274c", "\u2716\ufe0f", "\u2716"}  # crosses
_YES = {"\U0001f44d", *_CHECK}  # and thumbs up
_NO = {"\U0001f44e", *_CROSS}  # and thumbs down


def answer_by_reaction(controls: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The answer a reaction gives, or None when it is no answer."""
    key = key.strip()
    buttons = controls.get("buttons") or []
    if key in KEYCAPS and KEYCAPS.index(key) < len(buttons):
        return {"value": buttons[KEYCAPS.index(key)]["value"]}
    if "draft" in controls:
        return (
            {"action": "send"} if key in _CHECK else {"action": "discard"} if key in _NO else None
        )
    wanted = "approve" if key in _YES else "deny" if key in _NO else None
    for button in buttons:
        if wanted is not None and str(button["value"]).casefold() == wanted:
            return {"value": button["value"]}
    return None


def answered_but_waiting(session: Session) -> list[tuple[str, str]]:
    """(turn id, question id) of turns still waiting on a question that has its answer.

    The wake-up of such a turn was lost (the server died between storing the answer and
    sending it); the caller sends it again.
    """
    rows = session.execute(
        select(Turn.id, Turn.waiting_on)
        .join(Message, Message.id == Turn.waiting_on)
        .where(Turn.status == "running", Message.answer_id.is_not(None))
    ).all()
    return [(row[0], str(row[1])) for row in rows]


def get_message(session: Session, conversation_id: str, message_id: str) -> MessageInfo:
    """One message of the conversation."""
    row = session.get(Message, message_id)
    if row is None or row.conversation_id != conversation_id:
        raise NotFound(f"no message {message_id!r} in this conversation")
    return message_info(row)
