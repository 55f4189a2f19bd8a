"""The newest note (the time, what memory recalls, what the server changed since the pin), said
once and kept where it was said.

A note rides last in the request that first says it, and is then kept in the history at that
place (engine/model_calls.py `keep_reply`), as a person's "(it is 3 pm)" stays in a chat. A
request after it repeats it where it was: a model with a KV cache (the local one) keeps all it
evaluated and reads only what the history gained since, where a note dropped from the middle
made it read its own reply and everything after again (about 25 ms a token on 2 cores). The
next note says only what changed since: the time at a new run or some minutes later, memory
when what it recalls changed, a change of the server's only once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from nightowl.harness.transcript import Entry

NOTE_META = "note"  # an entry's meta key: what the note said (a kept note, or the newest)
# Within one run (a turn's steps), the time is said again only after this long.
TIME_AGAIN_AFTER = timedelta(minutes=5)


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
) -> Entry | None:
    """The note the next request ends with: what the history's notes did not say yet (None:
    nothing new). `memory`: what memory recalls now ("" nothing); `changes`: the server's
    changes since the pin, one line each."""
    said = said_notes(history)
    last_time = next((n for n in reversed(said) if n.get("time")), None)
    last_memory = next((n["memory"] for n in reversed(said) if "memory" in n), "")
    # The server's changes the last note knew of: a line is said when it is not among them.
    known: list[str] = next((n["changes"] for n in reversed(said) if "changes" in n), [])
    parts: list[str] = []
    meta: dict[str, Any] = {"run": run_id}
    if (
        last_time is None
        or last_time.get("run") != run_id
        or now - datetime.fromisoformat(str(last_time["time"])) >= TIME_AGAIN_AFTER
    ):
        parts.append(time_line(now))
        meta["time"] = now.isoformat()
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
    if not parts:
        return None
    return Entry(kind="notice", text="\n\n".join(parts), trust="agent", meta={NOTE_META: meta})
