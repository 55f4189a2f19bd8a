"""Clients' ids and the server's keys live in two namespaces (SQLite and PostgreSQL): a client
can send any id, the server's outbox, notices and channel answers still deliver exactly once,
and an id reused for another message is a conflict that writes nothing (never a database
error at the API's edge)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import append_message, create_conversation, messages_after
from nightowl.store.database import Database
from nightowl.store.errors import Conflict, Invalid
from nightowl.store.inbox import inbox_items
from nightowl.store.migrate import downgrade, upgrade
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import answer_question
from nightowl.store.turns import turns_of
from nightowl.store.users import ensure_owner
from tests.store.test_inbox import _ask, _running_turn
from tests.store.test_store import RecordingQueue

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _conversation(database: Database) -> str:
    with database.write() as session:
        owner = ensure_owner(session)
        return create_conversation(session, owner.id).id


def _from_client(conversation_id: str, client_id: str, text: str) -> IncomingMessage:
    return IncomingMessage(
        source="api",
        idempotency_key=f"{conversation_id}:{client_id}",
        conversation_id=conversation_id,
        text=text,
        trust="owner",
        priority=Priority.OWNER_DIRECT,
        client_id=client_id,
    )


def test_a_client_sending_an_outbox_key_first_cannot_hide_the_agents_message(
    database: Database,
) -> None:
    conversation = _conversation(database)
    router = Router(database, RecordingQueue())
    key = "out:turn_abc:0.0"  # the form the outbox uses for the agent's own messages
    sent = router.accept(_from_client(conversation, key, "pick one"))
    assert not sent.duplicate and sent.message.client_id == key
    with database.write() as session:
        reply = deliver_to_user(session, conversation, key=key, body="the reply", turn_id=None)
    with database.write() as session:  # a replayed step finds it delivered: once
        again = deliver_to_user(session, conversation, key=key, body="the reply", turn_id=None)
    assert reply.id == again.id != sent.message.id
    assert (reply.role, reply.body, reply.client_id, reply.server_key) == (
        "agent",
        "the reply",
        None,
        key,
    )
    with database.read() as session:
        assert [m.body for m in messages_after(session, conversation, 0)] == [
            "pick one",
            "the reply",
        ]


def test_a_client_id_shaped_like_a_notice_key_is_not_a_notice(database: Database) -> None:
    conversation = _conversation(database)
    router = Router(database, RecordingQueue())
    router.accept(_from_client(conversation, "guard:turn_x", "stop"))
    with database.write() as session:
        deliver_to_user(session, conversation, key="guard:turn_x", body="stopped", turn_id=None)
        deliver_to_user(
            session,
            conversation,
            key="budget:2026-12-04",
            body="budget",
            turn_id=None,
            role="notice",
        )
        owner = ensure_owner(session)
    with database.read() as session:
        kinds = sorted(item.kind for item in inbox_items(session, owner.id))
    assert kinds == ["budget_stop"]  # the agent's message under guard: is no notice either


def test_a_client_id_another_message_took_is_a_conflict_that_writes_nothing(
    database: Database,
) -> None:
    conversation = _conversation(database)
    queue = RecordingQueue()
    router = Router(database, queue)
    with database.write() as session:  # e.g. an answer to a question, sent with this id
        append_message(
            session, conversation, role="user", body="Pay", trust="owner", client_id="x9"
        )
    with pytest.raises(Conflict) as refused:
        router.accept(_from_client(conversation, "x9", "Pick one"))
    assert refused.value.code == "client_id_reused"
    assert "x9" in str(refused.value) and "new client_id" in str(refused.value)
    with database.read() as session:
        assert [m.body for m in messages_after(session, conversation, 0)] == ["Pay"]
        assert turns_of(session, conversation) == []
    assert queue.woken == []


def test_a_message_is_keyed_by_its_client_or_by_the_server_not_both(database: Database) -> None:
    conversation = _conversation(database)
    with database.write() as session, pytest.raises(Invalid, match="not both"):
        append_message(
            session,
            conversation,
            role="user",
            body="x",
            trust="owner",
            client_id="a",
            server_key="b",
        )


def _insert(db: Database, table: str, **values: Any) -> None:
    columns = ", ".join(values)
    params = ", ".join(f":{k}" for k in values)
    with db.engine.begin() as connection:
        connection.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({params})"), values)


@pytest.mark.empty_database
def test_the_migration_moves_the_servers_keys_out_of_the_clients_namespace(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:
        upgrade(db, "0042")
        _insert(db, "users", id="u1", name="owner", role="owner", created_at=NOW)
        _insert(
            db,
            "conversations",
            id="c1",
            owner_id="u1",
            kind="direct",
            channel="web",
            title="",
            last_seq=7,
            created_at=NOW,
            updated_at=NOW,
        )
        _insert(
            db,
            "channels",
            id="chn_1",
            owner_id="u1",
            kind="matrix",
            name="matrix",
            settings="{}",
            position="{}",
            status="ok",
            error="",
            created_at=NOW,
            updated_at=NOW,
        )
        rows = [
            ("user", "web-1"),  # a client's
            ("user", "out:turn_z:0.0"),  # a client's too: it came from the API as a user's
            ("agent", "out:turn_a:0.0"),
            ("notice", "guard:turn_a"),
            ("user", "task:hlp_1:1"),
            ("user", "chn_1:$event"),  # a channel answer's
            ("user", "chn_2:x"),  # no such channel: a client's
        ]
        for seq, (role, key) in enumerate(rows, 1):
            _insert(
                db,
                "messages",
                id=f"m{seq}",
                conversation_id="c1",
                seq=seq,
                role=role,
                body="b",
                trust="owner",
                client_id=key,
                created_at=NOW,
            )
        upgrade(db)
        with db.engine.connect() as connection:
            found = connection.execute(
                text("SELECT client_id, server_key FROM messages ORDER BY seq")
            ).all()
        assert [tuple(row) for row in found] == [
            ("web-1", None),
            ("out:turn_z:0.0", None),
            (None, "out:turn_a:0.0"),
            (None, "guard:turn_a"),
            (None, "task:hlp_1:1"),
            (None, "chn_1:$event"),
            ("chn_2:x", None),
        ]
        # The memory search index's triggers on messages survive (no table rebuild dropped them).
        _insert_message(db, "m8", 8, "after the upgrade")
        assert _indexed(db, "m8")
        downgrade(db, "0042")
        with db.engine.connect() as connection:
            back = connection.execute(text("SELECT client_id FROM messages ORDER BY seq")).all()
        assert [row[0] for row in back][:7] == [key for _role, key in rows]
        _insert_message(db, "m9", 9, "after the downgrade")
        assert _indexed(db, "m9")
    finally:
        db.dispose()


def _insert_message(db: Database, message_id: str, seq: int, body: str) -> None:
    _insert(
        db,
        "messages",
        id=message_id,
        conversation_id="c1",
        seq=seq,
        role="user",
        body=body,
        trust="owner",
        created_at=NOW,
    )


def _indexed(db: Database, message_id: str) -> bool:
    with db.engine.connect() as connection:
        found = connection.execute(
            text("SELECT count(*) FROM memory_index WHERE kind = 'message' AND item_id = :id"),
            {"id": message_id},
        ).scalar_one()
    return found == 1


def test_an_answers_key_repeated_returns_it_and_with_another_answer_is_a_conflict(
    database: Database,
) -> None:
    conversation = _conversation(database)
    with database.write() as session:
        owner = ensure_owner(session)
    turn = _running_turn(database, conversation)
    buttons = [{"label": "Tea", "value": "tea"}, {"label": "Coffee", "value": "coffee"}]
    question = _ask(database, conversation, turn, "q1", {"buttons": buttons})
    with database.write() as session:
        first = answer_question(
            session,
            conversation,
            question,
            answer={"value": "tea"},
            client_id="a1",
            author_id=owner.id,
        )
    with database.write() as session:  # a retry: the same answer
        again = answer_question(
            session,
            conversation,
            question,
            answer={"value": "tea"},
            client_id="a1",
            author_id=owner.id,
        )
    assert again.duplicate and again.message.id == first.message.id
    with database.write() as session, pytest.raises(Conflict) as other:
        answer_question(
            session,
            conversation,
            question,
            answer={"value": "coffee"},
            client_id="a1",
            author_id=owner.id,
        )
    assert other.value.code == "client_id_reused" and "different answer" in str(other.value)
    # A channel's answer goes by the server's key, which no client id can take.
    with database.write() as session, pytest.raises(Conflict, match="already answered"):
        answer_question(
            session,
            conversation,
            question,
            answer={"value": "tea"},
            server_key="a1",
            author_id=owner.id,
        )
    with database.read() as session:
        answers = [m for m in messages_after(session, conversation, 0) if m.meta.get("answer")]
    assert [(m.body, m.client_id) for m in answers] == [("Tea", "a1")]
