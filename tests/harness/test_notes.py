"""The newest note is said once and kept where it was said: the next one says only what
changed (harness/notes.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightowl.harness.notes import NOTE_META, TIME_AGAIN_AFTER, newest_note, said_notes
from nightowl.harness.transcript import Entry

NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ASK = Entry(kind="user", text="What is 17 times 3?")
MEMORY = "Work log (information only):\n- asked about owls"


def _kept(history: list[Entry], note: Entry | None) -> list[Entry]:
    """The history after a call that was shown `note` (kept before its reply)."""
    assert note is not None
    reply = Entry(kind="assistant", text="ok")
    return [*history, Entry.from_dict(note.to_dict()), reply]


def test_the_first_note_says_the_time_memory_and_the_changes() -> None:
    note = newest_note([ASK], "run1", NOON, MEMORY, ["New tool: x — does x."])
    assert note is not None and note.kind == "notice" and note.trust == "agent"
    assert note.text.split("\n\n") == [
        "Current time: 2026-12-03 12:00 UTC.",
        MEMORY,
        "New tool: x — does x.",
    ]
    assert said_notes([ASK, note]) == [note.meta[NOTE_META]]


def test_a_later_step_of_the_run_says_nothing_new_until_something_changed() -> None:
    history = _kept([ASK], newest_note([ASK], "run1", NOON, MEMORY, []))
    assert newest_note(history, "run1", NOON + timedelta(minutes=2), MEMORY, []) is None
    later = newest_note(history, "run1", NOON + TIME_AGAIN_AFTER, MEMORY, [])
    assert later is not None and later.text == "Current time: 2026-12-03 12:05 UTC."
    changed = newest_note(history, "run1", NOON, "Work log:\n- something new", [])
    assert changed is not None and changed.text == "Work log:\n- something new"


def test_a_new_run_hears_the_time_and_only_memory_that_changed() -> None:
    history = _kept([ASK], newest_note([ASK], "run1", NOON, MEMORY, []))
    history.append(Entry(kind="user", text="Add 9 to that."))
    note = newest_note(history, "run2", NOON + timedelta(minutes=1), MEMORY, [])
    assert note is not None and note.text == "Current time: 2026-12-03 12:01 UTC."
    # Memory that recalls nothing now is not a note of its own.
    quiet = _kept(history, note)
    assert newest_note(quiet, "run2", NOON + timedelta(minutes=1), "", []) is None


def test_a_change_of_the_server_is_said_once_and_again_when_it_comes_back() -> None:
    gone = "Connector crm_* is gone; do not call its tools."
    new = "Connector crm_* is new or updated: Our CRM."
    history = _kept([ASK], newest_note([ASK], "run1", NOON, "", [new]))
    assert newest_note(history, "run1", NOON, "", [new]) is None
    removed = newest_note(history, "run1", NOON, "", [gone])
    assert removed is not None and removed.text == gone
    history = _kept(history, removed)
    back = newest_note(history, "run1", NOON, "", [new])
    assert back is not None and back.text == new
