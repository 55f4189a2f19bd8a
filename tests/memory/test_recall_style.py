"""How much of the work log a message's memory note shows, per prompt style (both databases):
the full style adds recent entries to the relevant ones; the small-model style shows only
entries relevant to the newest messages, so an earlier, unrelated reply is not there to copy."""

from __future__ import annotations

from nightowl.harness.prompt import PROMPT_STYLES
from nightowl.memory.context import memory_note
from nightowl.memory.worklog import write_entry
from nightowl.messages import Entry
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.transcript import put_entry
from nightowl.store.users import ensure_owner

EARLIER = "Asked: What can you do? Told the owner: I can help you with files and timers."
RELEVANT = "Asked: Book the dentist. Told the owner: The dentist is booked for Tuesday."


def _note(database: Database, style: str, newest: str) -> str:
    chosen = PROMPT_STYLES[style]
    with database.write() as session:
        owner = ensure_owner(session).id
        conversation = create_conversation(session, owner).id
        history = [Entry(kind="user", text=newest, trust="owner")]
        return memory_note(
            session, conversation, "", history, chosen.log_entries, chosen.recent_log_entries
        )


def test_the_small_style_shows_only_relevant_work_log_entries(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        write_entry(session, owner, EARLIER, trust="owner")
        write_entry(session, owner, RELEVANT, trust="owner")
    full = _note(database, "full", "When is the dentist appointment?")
    small = _note(database, "small", "When is the dentist appointment?")
    assert "files and timers" in full and "dentist is booked" in full
    assert "dentist is booked" in small and "files and timers" not in small
    # Nothing relevant: the small style shows no work log at all.
    assert "Work log" not in _note(database, "small", "Write a poem about owls.")


def test_the_work_log_leaves_out_turns_the_history_still_holds(database: Database) -> None:
    """A turn whose own messages the conversation's history holds is not repeated by the work
    log (in either style); a turn of another conversation is recalled as before."""
    question = "When is the dentist appointment?"
    with database.write() as session:
        owner = ensure_owner(session).id
        here = create_conversation(session, owner).id
        elsewhere = create_conversation(session, owner).id
        for conversation, turn, summary in (
            (here, "turn-here", "Asked: dentist? Told the owner: the dentist is on Monday."),
            (elsewhere, "turn-there", RELEVANT),
        ):
            put_entry(session, conversation, turn, f"{turn}:m", Entry(kind="user", text="x"))
            write_entry(session, owner, summary, conversation, turn, trust="owner")
    for style in ("full", "small"):
        chosen = PROMPT_STYLES[style]
        with database.write() as session:
            history = [Entry(kind="user", text=question, trust="owner")]
            note = memory_note(
                session, here, "", history, chosen.log_entries, chosen.recent_log_entries
            )
        assert "dentist is booked" in note, style  # the other conversation's turn
        assert "on Monday" not in note, style  # this conversation's history holds it
