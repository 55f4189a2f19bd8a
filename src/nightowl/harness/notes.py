"""The newest note (the time, what memory recalls, what the server changed since the pin), kept
where it was said.

Every request ends with a note — the time, at least, as before notes were kept: with no note
after a tool's result, a helper on the local model misread that result in 3 of 6 runs (1 of 4
with the note there; 1 of 7 when notes were not kept). Once the call
is made, the note stays in the history at that place (engine/model_calls.py `keep_reply`), as a
person's "(it is 3 pm)" stays in a chat, so the next request repeats this one whole and grows
only at the end: a model with a KV cache (the local one) reads only what the history gained,
where a note dropped from the middle made it read its own reply and everything after again
(about 25 ms a token on 2 cores). Beyond the time, a note says only what changed since the
notes before it: memory when what it recalls changed, a change of the server once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nightowl.messages import Entry

NOTE_META = "note"  # an entry's meta key: what the note said (a kept note, or the newest)


def time_line(now: datetime) -> str:
    """The time as a note says it."""
    return f"Current time: {now.strftime('%Y-%m-%d %H:%M UTC')}."


def said_notes(history: Sequence[Entry]) -> list[dict[str, Any]]:
    """What the notes kept in the history said, oldest first."""
    return [entry.meta[NOTE_META] for entry in history if NOTE_META in entry.meta]


def newest_note(
    history: Sequence[Entry],
    run_id: str,
    now: datetime,
    memory: str,
    changes: Sequence[str],
) -> Entry:
    """The note the next request ends with: the time, and what the history's notes did not
    say yet. `memory`: what memory recalls now ("" nothing); `changes`: the server's
    changes since the pin, one line each."""
    said = said_notes(history)
    last_memory = next((n["memory"] for n in reversed(said) if "memory" in n), "")
    # The server's changes the last note knew of: a line is said when it is not among them.
    known: list[str] = next((n["changes"] for n in reversed(said) if "changes" in n), [])
    parts = [time_line(now)]
    meta: dict[str, Any] = {"run": run_id, "time": now.isoformat()}
    if memory != last_memory:
        if memory:
            parts.append(memory)
        meta["memory"] = memory
    current = list(dict.fromkeys(changes))
    new = [line for line in current if line not in known]
    if new:
        parts.append("\n".join(new))
    if current != known:
        meta["changes"] = current
    return Entry(kind="notice", text="\n\n".join(parts), trust="agent", meta={NOTE_META: meta})
