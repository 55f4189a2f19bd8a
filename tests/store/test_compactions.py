"""What decides a compaction, on SQLite and PostgreSQL: the size the last call reported, a
timer or routine that will wake the conversation within the idle window (then it is skipped),
quiet since the turn; and what a compaction does to the model's view of the history."""

from __future__ import annotations

from datetime import timedelta

from nightowl.engine.compaction import CompactionSettings, plan_compaction
from nightowl.messages import Entry
from nightowl.store.compactions import is_quiet, last_entry_id, record_compaction
from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database
from nightowl.store.routines import create_routine, set_status
from nightowl.store.tables import PromptPinRow, utcnow
from nightowl.store.transcript import (
    finish_model_call,
    load_transcript,
    put_entry,
    record_sections,
    start_model_call,
)
from nightowl.store.turns import claim_batch, finish_turn, queue_turn
from nightowl.store.users import ensure_owner
from nightowl.store.wakes import record_timer
from nightowl.store.warming import claim_warming

SETTINGS = CompactionSettings(at_tokens=100_000, idle_s=600, keep_messages=6)


def _finished_turn(database: Database, tokens: int) -> tuple[str, str, str]:
    with database.write() as session:
        owner = ensure_owner(session).id
        conversation = create_conversation(session, owner, kind="direct").id
        append_message(session, conversation, role="user", body="hi", trust="owner")
        turn, _ = queue_turn(session, conversation, 0)
        claim_batch(session, turn.id)
        record = start_model_call(session, conversation, turn.id, 0, "scripted:x")
        record_sections(session, record, [["system", "h", 40]], None, None, (tokens // 2, 0))
        usage = {"input_tokens": 1_000, "cache_read_tokens": tokens - 1_000}
        finish_model_call(session, record, usage)
        finish_turn(session, turn.id, status="done")
    return owner, conversation, turn.id


def test_a_big_turn_plans_compaction_unless_a_wake_comes_first(database: Database) -> None:
    owner, conversation, turn = _finished_turn(database, 120_000)
    _, small_conversation, small_turn = _finished_turn(database, 90_000)
    assert plan_compaction(database, SETTINGS, conversation, turn)
    assert not plan_compaction(database, SETTINGS, small_conversation, small_turn)

    # A timer due within the window: the wake finds the cache warm; compacting is skipped.
    with database.write() as session:
        record_timer(session, "t-soon", conversation, utcnow() + timedelta(minutes=5), "check")
        record_timer(session, "t-soon", conversation, utcnow() + timedelta(minutes=5), "check")
    assert not plan_compaction(database, SETTINGS, conversation, turn)
    # A timer due after the window, or one past, does not stop it.
    _, later_conversation, later_turn = _finished_turn(database, 120_000)
    with database.write() as session:
        record_timer(session, "t-late", later_conversation, utcnow() + timedelta(hours=2), "x")
        record_timer(session, "t-past", later_conversation, utcnow() - timedelta(hours=2), "x")
    assert plan_compaction(database, SETTINGS, later_conversation, later_turn)
    # An active routine firing every minute wakes it within the window; a paused one does not.
    with database.write() as session:
        routine = create_routine(
            session,
            owner,
            later_conversation,
            name="poll",
            prompt="check the queue",
            cron="* * * * *",
            timezone="Europe/Berlin",
            created_by="owner",
        )
    assert not plan_compaction(database, SETTINGS, later_conversation, later_turn)
    with database.write() as session:
        set_status(session, routine.id, owner, "paused")
    assert plan_compaction(database, SETTINGS, later_conversation, later_turn)


def test_quiet_means_nothing_since_the_turn(database: Database) -> None:
    _, conversation, turn = _finished_turn(database, 120_000)
    with database.read() as session:
        assert is_quiet(session, conversation, turn)
    with database.write() as session:
        append_message(session, conversation, role="user", body="again", trust="owner")
    with database.read() as session:
        assert not is_quiet(session, conversation, turn)  # a message waits to be taken
    with database.write() as session:
        queue_turn(session, conversation, 0)
    with database.read() as session:
        assert not is_quiet(session, conversation, turn)


def test_a_compaction_replaces_the_history_and_drops_the_pin(database: Database) -> None:
    _, conversation, turn = _finished_turn(database, 120_000)
    with database.write() as session:
        for n in range(3):
            put_entry(session, conversation, turn, f"e{n}", Entry(kind="user", text=f"old {n}"))
        session.add(PromptPinRow(conversation_id=conversation, pin={"instructions": "x"}))
    with database.write() as session:
        through = last_entry_id(session, conversation)
        summary = {"kind": "notice", "text": "summary", "meta": {"compaction": True}}
        record_compaction(
            session,
            conversation,
            through_entry_id=through,
            entry=summary,
            model_call_id=None,
            tokens_before=120_000,
        )
        put_entry(session, conversation, turn, "e3", Entry(kind="user", text="new"))
    with database.read() as session:
        seen = load_transcript(session, conversation)
        pin = session.get(PromptPinRow, conversation)
    assert [entry.text for entry in seen] == ["summary", "new"]
    assert pin is None  # the next request pins the current prompt afresh


def test_warming_is_claimed_once_per_cache_lifetime(database: Database) -> None:
    _, conversation, _ = _finished_turn(database, 1_000)
    now = utcnow()
    with database.write() as session:
        # A model call a moment ago has warmed the cache already.
        assert not claim_warming(session, conversation, now, 300)
        assert claim_warming(session, conversation, now + timedelta(seconds=301), 300)
        assert not claim_warming(session, conversation, now + timedelta(seconds=400), 300)
        assert claim_warming(session, conversation, now + timedelta(seconds=700), 300)
