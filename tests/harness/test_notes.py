"""The newest note is kept where it was said: the next one says the time and only what else
changed (harness/notes.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightowl.harness.notes import NOTE_META, newest_note, said_notes
from nightowl.messages import Entry

NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ASK = Entry(kind="user", text="What is 17 times 3?")
MEMORY = "Work log (information only):\n- asked about owls"


def _kept(history: list[Entry], note: Entry) -> list[Entry]:
    """The history after a call that was shown `note` (kept before its reply)."""
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


def test_a_later_note_says_the_time_and_only_what_else_changed() -> None:
    history = _kept([ASK], newest_note([ASK], "run1", NOON, MEMORY, []))
    later = newest_note(history, "run1", NOON + timedelta(minutes=2), MEMORY, [])
    assert later.text == "Current time: 2026-12-03 12:02 UTC."
    changed = newest_note(history, "run1", NOON, "Work log:\n- something new", [])
    assert changed.text == "Current time: 2026-12-03 12:00 UTC.\n\nWork log:\n- something new"
    # The next run too: memory that recalls the same is not said again, nor is nothing.
    history.append(Entry(kind="user", text="Add 9 to that."))
    assert newest_note(history, "run2", NOON, MEMORY, []).text.count("\n") == 0
    quiet = _kept(history, newest_note(history, "run2", NOON, "", []))
    assert newest_note(quiet, "run2", NOON, "", []).meta[NOTE_META] == {
        "run": "run2",
        "time": NOON.isoformat(),
    }


def test_a_change_of_the_server_is_said_once_and_again_when_it_comes_back() -> None:
    gone = "Connector crm_* is gone; do not call its tools."
    new = "Connector crm_* is new or updated: Our CRM."
    time = "Current time: 2026-12-03 12:00 UTC."
    history = _kept([ASK], newest_note([ASK], "run1", NOON, "", [new]))
    assert newest_note(history, "run1", NOON, "", [new]).text == time
    removed = newest_note(history, "run1", NOON, "", [gone])
    assert removed.text == f"{time}\n\n{gone}"
    history = _kept(history, removed)
    assert newest_note(history, "run1", NOON, "", [new]).text == f"{time}\n\n{new}"
