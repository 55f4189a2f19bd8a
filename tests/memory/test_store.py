"""The memory store on SQLite and PostgreSQL: facts within bounds, the work log, notes, skills,
and full-text search scoped to one user."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from nightowl.memory.facts import (
    MAX_FACTS,
    MAX_PROFILE_CHARS,
    ProfileFull,
    Source,
    add_fact,
    get_fact,
    list_facts,
    profile_size,
    remove_fact,
    replace_fact,
    set_archived,
)
from nightowl.memory.notes import delete_expired, live_notes, write_note
from nightowl.memory.search import full_text_search
from nightowl.memory.skills import list_skills, skill_by_name, write_skill
from nightowl.memory.worklog import recent_entries, write_entry
from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.memory_tables import MemoryNote
from nightowl.store.tables import utcnow
from nightowl.store.users import create_user, ensure_owner


def _users(database: Database) -> tuple[str, str]:
    with database.write() as session:
        return ensure_owner(session).id, create_user(session, "dana").id


def test_the_profile_refuses_a_101st_fact_and_never_cuts(database: Database) -> None:
    owner, _ = _users(database)
    with database.write() as session:
        for n in range(MAX_FACTS):
            add_fact(session, owner, f"fact number {n}", Source())
    with database.write() as session, pytest.raises(ProfileFull, match="100 of 100 facts"):
        add_fact(session, owner, "one too many", Source())
    with database.read() as session:
        assert profile_size(session, owner)[0] == MAX_FACTS
        assert [f.text for f in list_facts(session, owner)][-1] == "fact number 99"


def test_the_profile_refuses_past_4000_characters(database: Database) -> None:
    owner, other = _users(database)
    with database.write() as session:
        for n in range(10):
            add_fact(session, owner, f"{n}" + "x" * 399, Source())  # 4,000 characters
        with pytest.raises(ProfileFull, match="4000 of 4000 characters"):
            add_fact(session, owner, "y", Source())
        # Another user's profile has its own bounds.
        add_fact(session, other, "dana likes tea", Source())
        first = list_facts(session, owner)[0]
        with pytest.raises(ProfileFull):
            replace_fact(session, owner, first.id, first.text + "z")
        replace_fact(session, owner, first.id, "short now")
        add_fact(session, owner, "room again", Source())
        with pytest.raises(Invalid, match="at most 500 characters"):
            add_fact(session, owner, "z" * 501, Source())
    with database.read() as session:
        count, chars = profile_size(session, owner)
    assert count == 11 and chars <= MAX_PROFILE_CHARS


def test_facts_keep_their_source_and_belong_to_one_user(database: Database) -> None:
    owner, other = _users(database)
    source = Source("untrusted", "conv_1", "msg_1", "turn_1")
    with database.write() as session:
        fact = add_fact(session, owner, "  invoices   go to  ap@example.com ", source)
    assert fact.text == "invoices go to ap@example.com"
    assert (fact.trust, fact.source_message_id, fact.source_turn_id) == (
        "untrusted",
        "msg_1",
        "turn_1",
    )
    with database.write() as session:
        with pytest.raises(NotFound):
            get_fact(session, other, fact.id)
        with pytest.raises(NotFound):
            remove_fact(session, other, fact.id)
        set_archived(session, owner, fact.id, True)
        assert list_facts(session, owner) == []
        assert len(list_facts(session, owner, include_archived=True)) == 1
        set_archived(session, owner, fact.id, False)
        remove_fact(session, owner, fact.id)
        assert list_facts(session, owner, include_archived=True) == []


def test_work_log_notes_and_skills(database: Database) -> None:
    owner, other = _users(database)
    with database.write() as session:
        first = write_entry(session, owner, "Booked the dentist for Tuesday.", turn_id="t1")
        again = write_entry(session, owner, "a re-run writes nothing new", turn_id="t1")
        assert again.id == first.id
        write_entry(session, owner, "Drafted the quarterly report.", turn_id="t2")
        write_note(session, owner, "waiting for Bob's reply", expires_in_minutes=30)
        with pytest.raises(Invalid, match="expires in 1 to"):
            write_note(session, owner, "forever", expires_in_minutes=0)
        skill = write_skill(
            session, owner, "file-expenses", "How to file expenses.", "1. Open…", "agent"
        )
        assert not skill.approved
        assert write_skill(session, owner, "tidy", "Tidy up.", "Do it.", "owner").approved
        with pytest.raises(Invalid, match="lowercase"):
            write_skill(session, owner, "Bad Name", "x", "y", "agent")
    with database.read() as session:
        assert [e.summary for e in recent_entries(session, owner)] == [
            "Drafted the quarterly report.",
            "Booked the dentist for Tuesday.",
        ]
        assert recent_entries(session, other) == []
        assert [n.text for n in live_notes(session, owner)] == ["waiting for Bob's reply"]
        assert [s.name for s in list_skills(session, owner)] == ["file-expenses", "tidy"]
        with pytest.raises(NotFound, match="there are: none"):
            skill_by_name(session, other, "tidy")
    # Notes expire.
    with database.write() as session:
        session.execute(update(MemoryNote).values(expires_at=utcnow() - timedelta(minutes=1)))
    with database.read() as session:
        assert live_notes(session, owner) == []
        assert full_text_search(session, owner, "Bob reply") == []
    with database.write() as session:
        assert delete_expired(session) == 1


def test_full_text_search_finds_every_kind_for_its_user_only(database: Database) -> None:
    owner, other = _users(database)
    with database.write() as session:
        conversation = create_conversation(session, owner)
        append_message(
            session,
            conversation.id,
            role="user",
            body="Please book flights to Lisbon for the conference",
            trust="owner",
        )
        theirs = create_conversation(session, other)
        append_message(
            session, theirs.id, role="user", body="Lisbon flights for Dana", trust="owner"
        )
        add_fact(session, owner, "Prefers aisle seats on flights", Source())
        write_entry(session, owner, "Compared flight prices to Lisbon.", turn_id="t1")
        write_note(session, owner, "Lisbon hotel shortlist: two options", 60)
        write_skill(
            session, owner, "book-flight", "Booking flights.", "Use the airline site.", "owner"
        )
    with database.read() as session:
        hits = full_text_search(session, owner, "flights to Lisbon")
        assert {h.kind for h in hits} == {"message", "fact", "log", "note", "skill"}
        assert all("Dana" not in h.text for h in hits)
        assert hits[0].kind in {"message", "log"}  # both words match, stemmed
        assert [h.kind for h in full_text_search(session, owner, "aisle", kinds=["fact"])] == [
            "fact"
        ]
        # Stemming: "booking" finds "book".
        assert any(h.kind == "message" for h in full_text_search(session, owner, "booking"))
        theirs_hits = full_text_search(session, other, "Lisbon")
        assert [h.text for h in theirs_hits] == ["Lisbon flights for Dana"]
        assert full_text_search(session, owner, "the of and") == []
        assert full_text_search(session, owner, 'weird "query" AND (NOT* -x') == []


def test_search_prefers_the_newer_of_two_equal_matches(database: Database) -> None:
    owner, _ = _users(database)
    with database.write() as session:
        old = write_entry(session, owner, "Paid the electricity bill in March.", turn_id="a")
        new = write_entry(session, owner, "Paid the electricity bill in April.", turn_id="b")
        # The same text twice shows once (the better hit).
        write_entry(session, owner, "Paid the electricity bill in April.", turn_id="c")
        from nightowl.store.memory_tables import WorkLogEntry

        session.execute(
            update(WorkLogEntry)
            .where(WorkLogEntry.id == old.id)
            .values(created_at=utcnow() - timedelta(days=200))
        )
        # The index follows an edit (the trigger re-indexes the summary).
        session.execute(
            update(WorkLogEntry)
            .where(WorkLogEntry.id == old.id)
            .values(summary="Paid the electricity bill in March.")
        )
    with database.read() as session:
        hits = full_text_search(session, owner, "electricity bill")
    assert [h.item_id for h in hits][1:] == [old.id]
    assert hits[0].text == "Paid the electricity bill in April." and len(hits) == 2
    assert new.id
