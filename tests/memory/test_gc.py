"""Memory's garbage collection on SQLite and PostgreSQL: notes expire, unused facts and log
entries are archived after the setting's days, used ones stay."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from nightowl.config import Settings
from nightowl.memory.facts import Source, add_fact, list_facts, mark_used
from nightowl.memory.gc import collect
from nightowl.memory.notes import live_notes, write_note
from nightowl.memory.search import full_text_search
from nightowl.memory.worklog import mark_used as mark_log_used
from nightowl.memory.worklog import recent_entries, write_entry
from nightowl.store.database import Database
from nightowl.store.memory_tables import MemoryFact, MemoryNote, WorkLogEntry
from nightowl.store.tables import utcnow
from nightowl.store.users import ensure_owner


def test_the_archive_setting_defaults_to_90_days(monkeypatch: object) -> None:
    assert Settings().memory_archive_days == 90
    import os

    os.environ["NIGHTOWL_MEMORY_ARCHIVE_DAYS"] = "30"
    try:
        assert Settings().memory_archive_days == 30
    finally:
        del os.environ["NIGHTOWL_MEMORY_ARCHIVE_DAYS"]


def test_unused_memory_is_archived_and_used_memory_stays(database: Database) -> None:
    long_ago = utcnow() - timedelta(days=120)
    with database.write() as session:
        owner = ensure_owner(session).id
        stale = add_fact(session, owner, "Had a cat called Tom", Source())
        used = add_fact(session, owner, "Drinks oolong tea", Source())
        fresh = add_fact(session, owner, "Started a new job", Source())
        old_entry = write_entry(session, owner, "Sorted the inbox.", turn_id="t1")
        used_entry = write_entry(session, owner, "Planned the trip.", turn_id="t2")
        write_note(session, owner, "waiting on the plumber", 30)
        for model, ids in (
            (MemoryFact, [stale.id, used.id]),
            (WorkLogEntry, [old_entry.id, used_entry.id]),
        ):
            column = model.updated_at if model is MemoryFact else model.created_at  # type: ignore[attr-defined]
            session.execute(update(model).where(model.id.in_(ids)).values({column: long_ago}))  # type: ignore[attr-defined]
        session.execute(update(MemoryNote).values(expires_at=utcnow() - timedelta(seconds=1)))
        # Used lately: they stay.
        mark_used(session, owner, [used.id])
        mark_log_used(session, owner, [used_entry.id])
    with database.write() as session:
        done = collect(session, archive_days=90)
    assert (done.notes_expired, done.facts_archived, done.log_archived) == (1, 1, 1)
    with database.read() as session:
        assert sorted(f.text for f in list_facts(session, owner)) == [
            "Drinks oolong tea",
            "Started a new job",
        ]
        assert [e.summary for e in recent_entries(session, owner)] == ["Planned the trip."]
        assert live_notes(session, owner) == []
        # Archived is out of the prompt, not forgotten: search still finds it.
        assert [h.kind for h in full_text_search(session, owner, "cat Tom")] == ["fact"]
    with database.write() as session:
        assert collect(session, archive_days=90) == type(done)(0, 0, 0)
    assert fresh.id
