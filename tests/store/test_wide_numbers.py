"""Numbers that grow with use (message sequence numbers, read positions, transcript and audit
row ids) keep working past 2^31 on SQLite and PostgreSQL, and migration 0015 widens an existing
PostgreSQL store without losing a row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text, update

from nightowl.messages import Entry
from nightowl.store.audit import audit_log, record_audit_event
from nightowl.store.conversations import (
    append_message,
    create_conversation,
    get_conversation,
    mark_read,
    messages_after,
)
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.tables import Conversation, TranscriptEntry
from nightowl.store.transcript import put_entry
from nightowl.store.users import ensure_owner
from tests.databases import fresh_database

BEYOND_32_BITS = 2**40

# Integer columns that stay 32-bit on PostgreSQL, and why they cannot outgrow it.
BOUNDED = {
    ("turns", "priority"): "one of a handful of priorities",
    ("workers", "pid"): "a process id",
    ("computers", "uid"): "a host uid, at most 2e9 by NIGHTOWL_SANDBOX_UID_BASE's bound",
    ("model_calls", "step"): "a step of one turn (NIGHTOWL_MAX_STEPS_PER_TURN)",
    ("model_calls", "input_tokens"): "one request's tokens",
    ("model_calls", "cache_read_tokens"): "one request's tokens",
    ("model_calls", "cache_write_tokens"): "one request's tokens",
    ("model_calls", "output_tokens"): "one reply's tokens",
    ("model_calls", "meter_prompt_tokens"): "one request's tokens",
    ("model_calls", "meter_prefix_tokens"): "one request's tokens",
    ("memory_passes", "input_tokens"): "one request's tokens",
    ("memory_passes", "output_tokens"): "one reply's tokens",
    ("compactions", "tokens_before"): "one prompt's tokens",
    ("turns", "starts_without_progress"): "at most NIGHTOWL_MAX_TURN_RECOVERIES + 1",
    ("helpers", "runs"): "the tasks one named helper was given, one at a time",
    ("push_deliveries", "attempts"): "at most 8 tries of one push (channels/webpush.py)",
    ("eval_results", "tokens"): "one case's replay: the tokens of one turn's requests",
    ("routine_firings", "missed"): "due times one catch-up stands for, counted up to 10,000",
}


def _next_ids_start_at(database: Database, value: int, conversation: str) -> None:
    """Move the transcript's and audit log's row ids on, as years of use would."""
    with database.write() as session:
        if database.is_postgres:
            for table in ("transcript_entries", "audit_events"):
                session.execute(
                    text("SELECT setval(pg_get_serial_sequence(:table, 'id'), :value)"),
                    {"table": table, "value": value},
                )
            return
        # SQLite numbers a new row one past the largest id.
        session.execute(
            text(
                "INSERT INTO transcript_entries (id, conversation_id, turn_id, entry_key,"
                " payload, created_at) VALUES (:value, :conversation, 'old', 'old', '{}', '')"
            ),
            {"value": value, "conversation": conversation},
        )
        session.execute(
            text(
                "INSERT INTO audit_events (id, event_key, owner_id, conversation_id, turn_id,"
                " kind, tool, effect, decision, reason, detail, at) VALUES"
                " (:value, 'old', '', :conversation, '', '', '', '', '', '', '{}', '')"
            ),
            {"value": value, "conversation": conversation},
        )


def test_sequence_numbers_and_row_ids_go_past_32_bits(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id).id
        session.execute(
            update(Conversation)
            .where(Conversation.id == conversation)
            .values(last_seq=BEYOND_32_BITS)
        )
    with database.write() as session:
        message = append_message(
            session, conversation, role="user", body="far along", trust="owner"
        )
    assert message.seq == BEYOND_32_BITS + 1
    with database.write() as session:
        assert mark_read(session, conversation, owner.id, message.seq) == message.seq
    with database.read() as session:
        assert [m.id for m in messages_after(session, conversation, BEYOND_32_BITS)] == [message.id]
        assert get_conversation(session, conversation, owner.id).read_seq == message.seq

    _next_ids_start_at(database, BEYOND_32_BITS, conversation)
    with database.write() as session:
        put_entry(session, conversation, "turn-1", "k1", Entry(kind="user", text="x"))
        record_audit_event(
            session,
            "audit-1",
            owner_id=owner.id,
            conversation_id=conversation,
            turn_id="turn-1",
            kind="reviewed",
            tool="shell",
            effect="write",
            decision="allow",
        )
    with database.read() as session:
        entry = select(TranscriptEntry.id).where(TranscriptEntry.entry_key == "k1")
        assert session.scalar(entry) == BEYOND_32_BITS + 1
        audit = audit_log(session, owner.id, before=2**62)
        assert [a.id for a in audit] == [BEYOND_32_BITS + 1]


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[Database]:
    with fresh_database("postgresql", tmp_path) as url:
        database = Database(url)
        yield database
        database.dispose()


def test_every_growing_number_is_64_bit_on_postgresql(postgres: Database) -> None:
    upgrade(postgres)
    with postgres.read() as session:
        narrow = session.execute(
            text(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = 'public' AND data_type IN ('integer', 'smallint')"
            )
        ).all()
        sequences = session.execute(
            text("SELECT sequencename, data_type FROM pg_sequences WHERE schemaname = 'public'")
        ).all()
    assert {(table, column) for table, column in narrow} == set(BOUNDED)
    assert sequences and {data_type for _, data_type in sequences} == {"bigint"}


def test_the_migration_widens_an_existing_store_and_keeps_its_rows(postgres: Database) -> None:
    upgrade(postgres, "0013")
    with postgres.write() as session:
        session.execute(
            text(
                "INSERT INTO users (id, name, role, created_at)"
                " VALUES ('usr_1', 'owner', 'owner', now())"
            )
        )
        session.execute(
            text(
                "INSERT INTO conversations (id, owner_id, kind, channel, title, last_seq,"
                " read_seq, created_at, updated_at)"
                " VALUES ('conv_1', 'usr_1', 'direct', 'api', 'old', 2, 1, now(), now())"
            )
        )
        for seq in (1, 2):
            session.execute(
                text(
                    "INSERT INTO messages (id, conversation_id, seq, role, body, trust,"
                    " created_at, meta)"
                    " VALUES (:id, 'conv_1', :seq, 'user', :body, 'owner', now(), '{}')"
                ),
                {"id": f"msg_{seq}", "seq": seq, "body": f"message {seq}"},
            )
        session.execute(
            text(
                "INSERT INTO transcript_entries (conversation_id, turn_id, entry_key, payload,"
                " created_at) VALUES ('conv_1', 'turn-1', 'k1', '{}', now())"
            )
        )
    upgrade(postgres)
    with postgres.read() as session:
        kept = messages_after(session, "conv_1", 0)
        assert [(m.seq, m.body) for m in kept] == [(1, "message 1"), (2, "message 2")]
        conversation = get_conversation(session, "conv_1", "usr_1")
        assert (conversation.last_seq, conversation.read_seq) == (2, 1)
        assert session.scalar(select(TranscriptEntry.id)) == 1
    # New rows continue the old numbering, and may now go far past 2^31.
    with postgres.write() as session:
        assert append_message(session, "conv_1", role="user", body="3", trust="owner").seq == 3
        put_entry(session, "conv_1", "turn-1", "k2", Entry(kind="user"))
    with postgres.read() as session:
        ids = session.scalars(select(TranscriptEntry.id).order_by(TranscriptEntry.id)).all()
        assert list(ids) == [1, 2]
    _next_ids_start_at(postgres, BEYOND_32_BITS, "conv_1")
    with postgres.write() as session:
        put_entry(session, "conv_1", "turn-1", "k3", Entry(kind="user"))
    with postgres.read() as session:
        assert max(session.scalars(select(TranscriptEntry.id))) == BEYOND_32_BITS + 1
