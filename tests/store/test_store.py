"""The app store on SQLite and PostgreSQL: schema, sequence numbers, idempotent sends, tokens."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import (
    NewMessage,
    append_message,
    append_messages,
    append_to_conversations,
    create_conversation,
    list_conversations,
    mark_read,
    messages_after,
    previews,
    unread_counts,
)
from nightowl.store.database import Database
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.migrate import downgrade, newest_revision, revision_status, upgrade
from nightowl.store.questions import validate_answer
from nightowl.store.tables import AccessToken
from nightowl.store.turns import TurnInfo, claim_batch, queue_turns, turns_of
from nightowl.store.users import create_token, ensure_owner, revoke_token, user_for_token


class RecordingQueue:
    """The conversation queue interface, recording which turns were woken."""

    def __init__(self) -> None:
        self.woken: list[TurnInfo] = []
        self.preempted: list[str] = []
        self.delays: list[float] = []
        self._lock = threading.Lock()

    def wake(self, turn: TurnInfo, delay_s: float = 0.0) -> None:
        with self._lock:
            self.woken.append(turn)
            self.delays.append(delay_s)

    def preempt(self, turn_ids: list[str]) -> None:
        with self._lock:
            self.preempted.extend(turn_ids)


def _conversation(database: Database) -> tuple[str, str]:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
    return owner.id, conversation.id


def _incoming(conversation_id: str, client_id: str, text: str = "hi") -> IncomingMessage:
    return IncomingMessage(
        source="api",
        idempotency_key=f"{conversation_id}:{client_id}",
        conversation_id=conversation_id,
        text=text,
        trust="owner",
        priority=Priority.OWNER_DIRECT,
        client_id=client_id,
    )


def test_migrations_reach_head_and_rerun_is_a_no_op(database: Database) -> None:
    current, head = revision_status(database)
    assert current == head
    upgrade(database)
    assert revision_status(database) == (head, head)


def test_revisions_are_named_by_their_files_number_so_a_start_finds_the_newest_at_once() -> None:
    """upgrade() skips Alembic when the store is at `newest_revision()` (the largest file
    number): that holds only while every migration is revision N after N-1."""
    import re

    from nightowl.store import migrate

    files = sorted((Path(migrate.__file__).parent / "migrations" / "versions").glob("*_*.py"))
    previous = None
    for path in files:
        text = path.read_text()
        number = path.name.split("_", 1)[0]
        assert re.search(rf'^revision = "{number}"$', text, re.M), path.name
        down = re.search(r"^down_revision = (None|\"(\d+)\")$", text, re.M)
        assert down is not None and down.group(2) == previous, path.name
        previous = number
    assert newest_revision() == previous
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(migrate._config()).get_current_head() == previous


def test_a_store_at_an_older_revision_is_upgraded_and_one_at_the_newest_is_left(
    database: Database,
) -> None:
    downgrade(database, "0042")  # 0043 moved data: its own downgrade puts it back
    with database.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0036'"))
        connection.execute(text("DROP INDEX ix_messages_created"))
        connection.execute(text("DROP INDEX ix_channel_deliveries_external"))
        connection.execute(text("ALTER TABLE channels DROP COLUMN listener"))
        connection.execute(text("ALTER TABLE channels DROP COLUMN listener_until"))
        connection.execute(text("ALTER TABLE channel_bindings DROP COLUMN alerts_only"))
        connection.execute(text("ALTER TABLE computers DROP COLUMN host"))
        connection.execute(text("ALTER TABLE computers DROP COLUMN host_until"))
        connection.execute(text("DROP TABLE eval_results"))
        connection.execute(text("DROP TABLE eval_cases"))
    upgrade(database)  # 0037 to 0043 run again: the indexes, columns and tables are back
    assert revision_status(database) == (newest_revision(), newest_revision())
    with database.read() as session:
        inspector = inspect(session.connection())
        names = {i["name"] for i in inspector.get_indexes("messages")}
        names |= {i["name"] for i in inspector.get_indexes("channel_deliveries")}
        columns = {c["name"] for c in inspector.get_columns("channels")}
        columns |= {c["name"] for c in inspector.get_columns("channel_bindings")}
        columns |= {c["name"] for c in inspector.get_columns("computers")}
        columns |= {c["name"] for c in inspector.get_columns("messages")}
        tables = set(inspector.get_table_names())
    assert {"eval_cases", "eval_results"} <= tables
    assert {"ix_messages_created", "ix_channel_deliveries_external"} <= names
    assert {"listener", "listener_until", "alerts_only", "host", "host_until"} <= columns
    assert "server_key" in columns


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'wal.db'}")
    upgrade(database)
    with database.read() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    database.dispose()


def test_concurrent_appends_get_gapless_increasing_seqs(database: Database) -> None:
    _owner_id, conversation_id = _conversation(database)

    def append(n: int) -> int:
        with database.write() as session:
            return append_message(
                session, conversation_id, role="user", body=f"m{n}", trust="owner"
            ).seq

    with ThreadPoolExecutor(max_workers=8) as pool:
        seqs = list(pool.map(append, range(40)))
    assert sorted(seqs) == list(range(1, 41))
    with database.read() as session:
        stored = messages_after(session, conversation_id, 0)
        assert [m.seq for m in stored] == list(range(1, 41))
        assert [m.seq for m in messages_after(session, conversation_id, 35)] == [36, 37, 38, 39, 40]


def test_same_client_id_concurrently_stores_one_message(database: Database) -> None:
    _, conversation_id = _conversation(database)
    queue = RecordingQueue()
    router = Router(database, queue)
    barrier = threading.Barrier(20)

    def send(_: int) -> tuple[str, bool]:
        barrier.wait()
        accepted = router.accept(_incoming(conversation_id, "same-id"))
        return accepted.message.id, accepted.duplicate

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(send, range(20)))
    assert len({message_id for message_id, _ in results}) == 1
    assert sum(1 for _, duplicate in results if not duplicate) == 1
    with database.read() as session:
        assert len(messages_after(session, conversation_id, 0)) == 1
        assert len(turns_of(session, conversation_id)) == 1
    assert len(queue.woken) == 1


def test_messages_waiting_for_a_queued_turn_join_its_batch(database: Database) -> None:
    _, conversation_id = _conversation(database)
    queue = RecordingQueue()
    router = Router(database, queue)
    for n in range(3):
        router.accept(_incoming(conversation_id, f"c{n}", f"message {n}"))
    assert len(queue.woken) == 1  # one turn for the three
    turn = queue.woken[0]
    with database.write() as session:
        batch = claim_batch(session, turn.id)
    assert [m.body for m in batch] == ["message 0", "message 1", "message 2"]
    # A replayed claim returns the same batch; a message after the claim starts a new turn.
    with database.write() as session:
        assert [m.seq for m in claim_batch(session, turn.id)] == [1, 2, 3]
    router.accept(_incoming(conversation_id, "c3", "late"))
    assert len(queue.woken) == 2 and queue.woken[1].id != turn.id
    assert queue.preempted == [turn.id]  # the owner's direct message cuts the running turn


def test_tokens_are_stored_hashed_and_revocable(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        info, secret = create_token(session, owner.id, "laptop")
    with database.read() as session:
        hashes = list(session.scalars(select(AccessToken.token_hash)))
        assert secret not in hashes and all(len(h) == 64 for h in hashes)
        found = user_for_token(session, secret)
        assert found is not None and found.id == owner.id
    with database.write() as session:
        revoke_token(session, info.id)
    with database.read() as session:
        assert user_for_token(session, secret) is None


def test_the_owners_message_does_not_join_a_turn_waiting_out_a_batching_window(
    database: Database,
) -> None:
    _, conversation_id = _conversation(database)
    queue = RecordingQueue()
    router = Router(database, queue, batch_window_s=1.5)
    timer = IncomingMessage(
        source="timer",
        idempotency_key="t1",
        conversation_id=conversation_id,
        text="Timer due",
        trust="agent",
        priority=Priority.TIMER,
        role="notice",
    )
    router.accept(timer)
    router.accept(_incoming(conversation_id, "owner-1", "now, please"))
    assert [t.priority for t in queue.woken] == [Priority.TIMER, Priority.OWNER_DIRECT]
    assert queue.delays == [1.5, 0.0]
    # The urgent turn takes both messages; the timer's turn later finds nothing left.
    with database.write() as session:
        assert [m.seq for m in claim_batch(session, queue.woken[1].id)] == [1, 2]
        assert claim_batch(session, queue.woken[0].id) == []


def test_unread_counts_previews_and_a_read_position_that_never_moves_back(
    database: Database,
) -> None:
    owner, conversation = _conversation(database)
    with database.write() as session:
        quiet = create_conversation(session, owner).id
        append_message(session, conversation, role="user", body="book it", trust="owner")
        append_message(
            session, conversation, role="agent", body="\n  Booked.\nDetails", trust="agent"
        )
        append_message(session, conversation, role="notice", body="timer fired", trust="agent")
    with database.read() as session:
        infos = {c.id: c for c in list_conversations(session, owner)}
        assert unread_counts(session, list(infos.values())) == {conversation: 2}
        assert previews(session, list(infos.values())) == {conversation: "timer fired"}
        assert quiet not in previews(session, list(infos.values()))
    with database.write() as session:
        assert mark_read(session, conversation, owner, 2) == 2
    with database.write() as session:
        assert mark_read(session, conversation, owner, 1) == 2  # never back
        assert mark_read(session, conversation, owner, 99) == 3  # never past the newest
    with database.read() as session:
        infos = {c.id: c for c in list_conversations(session, owner)}
        assert infos[conversation].read_seq == 3
        assert unread_counts(session, list(infos.values())) == {}


def test_answers_are_checked_against_what_the_question_offers() -> None:
    buttons = {"buttons": [{"label": "Yes", "value": "y"}], "ask": "approval"}
    assert validate_answer(buttons, {"value": "y"}) == {"value": "y", "label": "Yes"}
    draft = {"draft": "Hi Sam"}
    assert validate_answer(draft, {"action": "send"}) == {"action": "send", "text": "Hi Sam"}
    assert validate_answer(draft, {"action": "send", "text": "Hey"})["text"] == "Hey"
    assert validate_answer(draft, {"action": "discard"}) == {"action": "discard"}
    for controls, answer, says in (
        (buttons, {"value": "n"}, "one of the question's buttons: 'y'"),
        (draft, {"action": "send", "text": "  "}, "text is empty"),
        (draft, {"value": "y"}, "action must be 'send'"),
        ({}, {"value": "y"}, "asks nothing"),
    ):
        with pytest.raises(Invalid, match=says):
            validate_answer(controls, answer)


def test_one_batch_writes_many_conversations_in_order(database: Database) -> None:
    _, first = _conversation(database)
    _, second = _conversation(database)
    with database.write() as session:
        append_messages(session, first, [NewMessage(role="user", body="a0", trust="owner")])
    with database.write() as session:
        written = append_to_conversations(
            session,
            {
                second: [
                    NewMessage(role="user", body=f"b{n}", trust="untrusted") for n in range(3)
                ],
                first: [NewMessage(role="user", body="a1", trust="owner")],
            },
        )
        # The group message finds (or makes) its turn; the owner's gets a more urgent one
        # that the less urgent arrivals of the same conversation join.
        turns = queue_turns(
            session, {second: {Priority.GROUP, Priority.OWNER_DIRECT}, first: {Priority.WEBHOOK}}
        )
    assert [(m.body, m.seq) for m in written[second]] == [("b0", 1), ("b1", 2), ("b2", 3)]
    assert [(m.body, m.seq) for m in written[first]] == [("a1", 2)]
    urgent, created = turns[(second, Priority.OWNER_DIRECT)]
    assert created and turns[(second, Priority.GROUP)] == (urgent, False)
    assert turns[(first, Priority.WEBHOOK)][1]
    with database.write() as session:
        again = queue_turns(session, {second: {Priority.WEBHOOK}})
        assert again[(second, Priority.WEBHOOK)] == (urgent, False)
    # An unknown conversation fails the batch, and nothing of it is kept.
    with pytest.raises(NotFound), database.write() as session:
        append_to_conversations(
            session,
            {
                first: [NewMessage(role="user", body="x", trust="owner")],
                "conv_missing": [NewMessage(role="user", body="y", trust="owner")],
            },
        )
    with database.read() as session:
        assert [m.body for m in messages_after(session, first, 0)] == ["a0", "a1"]


def test_a_change_announced_by_a_newer_server_is_read_and_an_unreadable_one_skipped() -> None:
    from nightowl.store.changes import Change, _parsed

    newer = '{"conversation_id": "c1", "owner_id": "u1", "seq": 3, "pushed": true, "later": 1}'
    assert _parsed(newer) == Change("c1", "u1", 3, pushed=True)
    for unreadable in ("not json", "[1, 2]", '{"conversation_id": "c1"}'):
        assert _parsed(unreadable) is None
