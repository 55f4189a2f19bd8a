"""The model's view of a conversation (private text included) and the record of each call."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from nightowl.messages import Entry, PromptPin
from nightowl.store.compactions import latest_compaction
from nightowl.store.ids import new_id
from nightowl.store.tables import (
    ModelCall,
    PromptPinRow,
    ToolRun,
    TranscriptEntry,
    utcnow,
)


def put_entry(session: Session, conversation_id: str, turn_id: str, key: str, entry: Entry) -> None:
    """Append an entry once per key (a re-run step overwrites its own entry in place). One
    statement: every step writes one."""
    session.flush()  # Core on the session's connection: what the session holds goes first
    connection = session.connection()
    connection.execute(
        _PUT_ENTRY[connection.dialect.name],
        {
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "entry_key": key,
            "payload": entry.to_dict(),
            "created_at": utcnow(),
        },
    )


def _put_entry_statement(insert_: Any) -> Any:
    statement = insert_(TranscriptEntry)
    return statement.on_conflict_do_update(
        index_elements=["conversation_id", "entry_key"],
        set_={"payload": statement.excluded.payload},
    )


# Prebuilt per dialect (every step writes one entry): built and compiled once, not per call.
_PUT_ENTRY = {
    "postgresql": _put_entry_statement(pg_insert),
    "sqlite": _put_entry_statement(sqlite_insert),
}


def put_entries(
    session: Session,
    conversation_id: str,
    turn_id: str,
    entries: list[tuple[str, Entry]],
) -> None:
    """`put_entry` for many (key, entry) pairs at once, in order."""
    if not entries:
        return
    keys = [key for key, _ in entries]
    existing: set[str] = set()
    for start in range(0, len(keys), 500):
        existing.update(
            session.scalars(
                select(TranscriptEntry.entry_key).where(
                    TranscriptEntry.conversation_id == conversation_id,
                    TranscriptEntry.entry_key.in_(keys[start : start + 500]),
                )
            )
        )
    for key, entry in entries:
        if key in existing:  # a replayed step: rewrite its entries in place
            put_entry(session, conversation_id, turn_id, key, entry)
    new = [
        {
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "entry_key": key,
            "payload": entry.to_dict(),
            "created_at": utcnow(),
        }
        for key, entry in entries
        if key not in existing
    ]
    if new:
        session.execute(insert(TranscriptEntry), new)


def load_transcript(session: Session, conversation_id: str) -> list[Entry]:
    """What the model sees of the conversation, in the order written: since its latest
    compaction, that compaction's summary entry and every entry after it."""
    compaction = latest_compaction(session, conversation_id)
    through = compaction.through_entry_id if compaction else 0
    since = {"conversation_id": conversation_id, "through": through}
    entries = [Entry.from_dict(payload) for payload in session.scalars(_ENTRIES_SINCE, since)]
    return [Entry.from_dict(compaction.entry), *entries] if compaction else entries


# Prebuilt: every model call reads the transcript.
_ENTRIES_SINCE = (
    select(TranscriptEntry.payload)
    .where(
        TranscriptEntry.conversation_id == bindparam("conversation_id"),
        TranscriptEntry.id > bindparam("through"),
    )
    .order_by(TranscriptEntry.id)
)
_TURNS_SINCE = (
    select(TranscriptEntry.turn_id)
    .where(
        TranscriptEntry.conversation_id == bindparam("conversation_id"),
        TranscriptEntry.id > bindparam("through"),
    )
    .distinct()
)


def transcript_turns(session: Session, conversation_id: str) -> set[str]:
    """The turns (and runs) whose entries `load_transcript` gives: the model sees them."""
    compaction = latest_compaction(session, conversation_id)
    through = compaction.through_entry_id if compaction else 0
    return set(
        session.scalars(_TURNS_SINCE, {"conversation_id": conversation_id, "through": through})
    )


def load_transcript_by_turn(session: Session, conversation_id: str) -> list[tuple[str, Entry]]:
    """`load_transcript` with the turn (or run) that wrote each entry ("" for a compaction's
    summary): what an eval case cuts at its failing turn."""
    compaction = latest_compaction(session, conversation_id)
    through = compaction.through_entry_id if compaction else 0
    rows = session.execute(
        select(TranscriptEntry.turn_id, TranscriptEntry.payload)
        .where(TranscriptEntry.conversation_id == conversation_id, TranscriptEntry.id > through)
        .order_by(TranscriptEntry.id)
    )
    entries = [(str(turn), Entry.from_dict(payload)) for turn, payload in rows]
    return [("", Entry.from_dict(compaction.entry)), *entries] if compaction else entries


def transcript_keys(session: Session, turn_id: str) -> list[str]:
    """The keys of the entries one turn (or helper run) wrote."""
    return list(
        session.scalars(select(TranscriptEntry.entry_key).where(TranscriptEntry.turn_id == turn_id))
    )


def load_turn_entries(session: Session, turn_id: str) -> list[Entry]:
    """The entries one turn wrote, in order."""
    return [
        Entry.from_dict(payload)
        for payload in session.scalars(
            select(TranscriptEntry.payload)
            .where(TranscriptEntry.turn_id == turn_id)
            .order_by(TranscriptEntry.id)
        )
    ]


def start_model_call(
    session: Session,
    conversation_id: str,
    turn_id: str,
    step: int,
    model: str,
    started_at: datetime | None = None,
) -> str:
    """Record that a model call is starting (or started at `started_at`); returns its id."""
    call_id = new_id("mc")
    session.add(
        ModelCall(
            id=call_id,
            conversation_id=conversation_id,
            turn_id=turn_id,
            step=step,
            model=model,
            started_at=started_at or utcnow(),
        )
    )
    return call_id


def finish_model_call(
    session: Session,
    call_id: str,
    usage: dict[str, int],
    error: str | None = None,
    cost_usd: float | None = None,
    **more: Any,
) -> None:
    """Record a model call's usage and cost (or its error), and `more` of its columns (its
    request's sections and meter), in one statement."""
    session.flush()  # a call recorded in this transaction is written first
    values = {"finished_at": utcnow(), "error": error, "cost_usd": cost_usd, **usage, **more}
    # Prebuilt: the SET clause is made of the columns given (one compiled form per set).
    session.connection().execute(_FINISH_CALL, {"_call": call_id, **values})


_FINISH_CALL = update(ModelCall).where(ModelCall.id == bindparam("_call"))


def start_tool_run(
    session: Session,
    conversation_id: str,
    turn_id: str,
    call_id: str,
    tool: str,
    effect: str,
    step_key: str | None = None,
) -> str:
    """Record that a tool starts executing; returns the run's id."""
    run_id = new_id("run")
    session.flush()  # Core on the session's connection: what the session holds goes first
    session.connection().execute(
        _START_RUN,
        {
            "id": run_id,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "call_id": call_id,
            "tool": tool,
            "effect": effect,
            "step_key": step_key,
            "is_error": False,
            "started_at": utcnow(),
        },
    )
    return run_id


def finish_tool_run(session: Session, run_id: str, is_error: bool) -> None:
    """Record that a tool run ended."""
    session.connection().execute(
        _FINISH_RUN, {"run_id": run_id, "ended_at": utcnow(), "failed": is_error}
    )


# Prebuilt (Core, on the session's connection): every tool call runs these.
_START_RUN = insert(ToolRun)
_FINISH_RUN = (
    update(ToolRun)
    .where(ToolRun.id == bindparam("run_id"))
    .values(finished_at=bindparam("ended_at"), is_error=bindparam("failed"))
)


def previous_sections(
    session: Session, conversation_id: str, before: str
) -> tuple[list[list[Any]], datetime] | None:
    """The section hashes of the conversation's latest request other than `before`, and when
    it was sent."""
    found = session.execute(
        _PREVIOUS_SECTIONS, {"conversation_id": conversation_id, "before": before}
    ).first()
    return (list(found[0]), found[1]) if found is not None and found[0] is not None else None


_PREVIOUS_SECTIONS = (
    select(ModelCall.sections, ModelCall.started_at)
    .where(
        ModelCall.conversation_id == bindparam("conversation_id"),
        ModelCall.id != bindparam("before"),
        ModelCall.sections.is_not(None),
    )
    .order_by(ModelCall.started_at.desc(), ModelCall.id.desc())
    .limit(1)
)


def record_sections(
    session: Session,
    call_id: str,
    sections: list[list[Any]],
    cache_break: str | None,
    explained: bool | None,
    meter: tuple[int, int] = (0, 0),
) -> None:
    """Keep a request's section hashes, where it broke the cached prefix, and the meter's
    (prompt tokens, shared prefix tokens)."""
    session.execute(
        update(ModelCall)
        .where(ModelCall.id == call_id)
        .values(
            sections=sections,
            cache_break=cache_break,
            cache_break_explained=explained,
            meter_prompt_tokens=meter[0],
            meter_prefix_tokens=meter[1],
        )
    )


def find_pin(session: Session, conversation_id: str) -> PromptPin | None:
    """The conversation's pinned prompt, if it has one."""
    row = session.get(PromptPinRow, conversation_id)
    return None if row is None else PromptPin.from_dict(row.pin)


def has_pin(session: Session, conversation_id: str) -> bool:
    """Whether the conversation has pinned its prompt (something was ever sent)."""
    return session.get(PromptPinRow, conversation_id) is not None


def prompt_pin(session: Session, conversation_id: str, make: Callable[[], PromptPin]) -> PromptPin:
    """The conversation's pinned prompt, pinned now (by `make`) if it has none yet."""
    found = find_pin(session, conversation_id)
    if found is not None:
        return found
    pin = make()
    session.add(PromptPinRow(conversation_id=conversation_id, pin=pin.to_dict()))
    session.flush()
    return pin
