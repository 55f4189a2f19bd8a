"""The inbox is computed from the store: items appear when something waits on a person and
leave when it is answered or read, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nightowl.store.conversations import append_message, create_conversation, mark_read
from nightowl.store.database import Database
from nightowl.store.errors import Conflict
from nightowl.store.inbox import inbox_items, still_waiting
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import answer_question, take_answer, wait_for_answer
from nightowl.store.tables import Trigger, utcnow
from nightowl.store.turns import claim_batch, finish_turn, queue_turn
from nightowl.store.users import create_user, ensure_owner


def _running_turn(database: Database, conversation_id: str, text: str = "hi") -> str:
    with database.write() as session:
        append_message(session, conversation_id, role="user", body=text, trust="owner")
        turn, _ = queue_turn(session, conversation_id, 0)
        claim_batch(session, turn.id)
    return turn.id


def _ask(
    database: Database, conversation_id: str, turn_id: str, key: str, controls: dict[str, Any]
) -> str:
    with database.write() as session:
        message = deliver_to_user(
            session,
            conversation_id,
            key=key,
            body=f"asking {key}",
            turn_id=turn_id,
            meta={"controls": controls, "important": True},
        )
        wait_for_answer(session, turn_id, message.id, "waiting")
    return message.id


def _kinds(database: Database, user_id: str, **filters: Any) -> list[tuple[str, str]]:
    with database.read() as session:
        return [
            (i.kind, i.message.conversation_id) for i in inbox_items(session, user_id, **filters)
        ]


def test_questions_approvals_and_drafts_wait_until_answered_anywhere(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        trip = create_conversation(session, owner.id, title="Trip")
        mail = create_conversation(session, owner.id, title="Mail")
        plans = create_conversation(session, owner.id, title="Plans")
    deadline = (utcnow() + timedelta(minutes=5)).isoformat()
    buttons = [{"label": "Approve", "value": "approve"}, {"label": "Deny", "value": "deny"}]
    approval = _ask(
        database,
        trip.id,
        _running_turn(database, trip.id),
        "a1",
        {"buttons": buttons, "ask": "approval", "deadline": deadline},
    )
    mail_turn = _running_turn(database, mail.id)
    _ask(database, mail.id, mail_turn, "d1", {"draft": "Hi Sam"})
    question_turn = _running_turn(database, plans.id)
    question = _ask(
        database,
        plans.id,
        question_turn,
        "q1",
        {"buttons": [{"label": "Tea", "value": "tea"}], "ask": "question"},
    )

    # The approval (with a deadline) comes first; each item names its conversation and link.
    assert _kinds(database, owner.id) == [
        ("approval", trip.id),
        ("question", plans.id),
        ("draft", mail.id),
    ]
    with database.read() as session:
        first = inbox_items(session, owner.id)[0]
    assert first.deadline is not None and first.conversation_title == "Trip"
    assert first.link == f"/#c={trip.id}&m={approval}"
    assert _kinds(database, owner.id, kinds=["draft"]) == [("draft", mail.id)]
    assert _kinds(database, owner.id, conversation_id=plans.id) == [("question", plans.id)]

    # Answered (on any device, by any channel): it leaves; the turn taking it changes nothing.
    with database.write() as session:
        answer_question(
            session, plans.id, question, answer={"value": "tea"}, client_id="c1", author_id=owner.id
        )
    assert ("question", plans.id) not in _kinds(database, owner.id)
    with database.read() as session:
        assert not still_waiting(session, question)
        assert still_waiting(session, approval)
    with database.write() as session:
        take_answer(session, question_turn, question)

    # A turn that stopped waiting (preempted, finished) takes its question with it.
    with database.write() as session:
        finish_turn(session, mail_turn, status="done")
    assert _kinds(database, owner.id) == [("approval", trip.id)]


def test_an_approval_whose_window_closed_is_no_longer_offered(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
    turn = _running_turn(database, conversation.id)
    past = (utcnow() - timedelta(seconds=1)).isoformat()
    buttons = [{"label": "Approve", "value": "approve"}]
    approval = _ask(
        database,
        conversation.id,
        turn,
        "a",
        {"buttons": buttons, "ask": "approval", "deadline": past},
    )
    assert _kinds(database, owner.id) == []
    with database.write() as session:
        try:
            answer_question(
                session,
                conversation.id,
                approval,
                answer={"value": "approve"},
                client_id="late",
                author_id=owner.id,
            )
        except Conflict:
            pass
        else:
            raise AssertionError("a late approval was taken")


def test_notices_wait_until_read_and_members_see_only_their_own(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        member = create_user(session, "sam")
        work = create_conversation(session, owner.id, title="Work")
        theirs = create_conversation(session, member.id, title="Sam's")
    turn = _running_turn(database, work.id)
    with database.write() as session:
        for key in (f"turn-error:{turn}", f"guard:{turn}", "budget:2026-12-01", f"x:{turn}"):
            deliver_to_user(session, work.id, key=key, body=key, turn_id=turn, role="notice")
        report = append_message(
            session, work.id, role="notice", body="helper report", trust="agent"
        )
        session.add(
            Trigger(
                id="trig_1",
                source="helper",
                idempotency_key="run-1",
                conversation_id=work.id,
                message_id=report.id,
            )
        )
        member_turn_notice = deliver_to_user(
            session, theirs.id, key="model-error:t2", body="no model", turn_id=None, role="notice"
        )
    kinds = sorted(kind for kind, _ in _kinds(database, owner.id))
    assert kinds == ["budget_stop", "failed_turn", "helper_report", "stopped_turn"]
    assert _kinds(database, member.id) == [("failed_turn", theirs.id)]
    with database.read() as session:
        assert still_waiting(session, member_turn_notice.id)

    # Read on any device: gone.
    with database.write() as session:
        mark_read(session, work.id, owner.id, report.seq)
    assert _kinds(database, owner.id) == []
    assert _kinds(database, member.id) == [("failed_turn", theirs.id)]
