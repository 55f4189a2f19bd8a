"""What a turn does first, in one transaction: record what the turns it cut off had finished
and what was cut, take every waiting message as its batch, and remember a routine's firing."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from nightowl.harness.interruption import interruption_record
from nightowl.messages import Entry
from nightowl.store.conversations import find_conversation
from nightowl.store.transcript import (
    load_turn_entries,
    put_entries,
    put_entry,
    transcript_keys,
)
from nightowl.store.turns import (
    claim_batch,
    cut_off_turns,
    get_turn,
    mark_interrupted,
    note_routine,
    set_activity,
)


@dataclass(frozen=True)
class Batch:
    """What a turn took: its conversation, the conversation's owner and the messages' seqs
    (none: a more urgent turn took them already)."""

    conversation_id: str
    owner_id: str
    seqs: list[int]


def take_turn_batch(session: Session, turn_id: str) -> Batch:
    """The turn's batch: its conversation, owner and the seqs of the messages it took."""
    turn = get_turn(session, turn_id)
    conversation = find_conversation(session, turn.conversation_id)
    for earlier in cut_off_turns(session, conversation.id, turn_id):
        entries = load_turn_entries(session, earlier)
        results, note = interruption_record(entries)
        for result in results:
            key = f"{earlier}:cut:{result.call_id}"
            put_entry(session, conversation.id, earlier, key, result)
        notice = Entry(kind="notice", text=note, trust="agent")
        put_entry(
            session,
            conversation.id,
            turn_id,
            f"{turn_id}:after:{earlier}",
            notice,
        )
        mark_interrupted(session, earlier)
    batch = claim_batch(session, turn_id)
    if batch:
        set_activity(session, turn_id, "thinking")
    taken = [
        (
            f"msg:{message.seq}",
            Entry(
                kind="notice" if message.role == "notice" else "user",
                text=message.body,
                trust=message.trust,
            ),
        )
        for message in batch
    ]
    put_entries(session, conversation.id, turn_id, taken)
    note_routine(session, turn_id, [message.id for message in batch])
    return Batch(conversation.id, conversation.owner_id, [m.seq for m in batch])


def take_guidance(session: Session, run_id: str) -> int:
    """A helper run takes the messages that arrived for it since its last step (the main
    agent's guidance) into its transcript; how many."""
    turn = get_turn(session, run_id)
    new = [m for m in claim_batch(session, run_id) if m.seq not in _taken(session, run_id)]
    entries = [
        (
            f"msg:{message.seq}",
            Entry(kind="user", text=message.body, trust=message.trust),
        )
        for message in new
    ]
    put_entries(session, turn.conversation_id, run_id, entries)
    return len(entries)


def _taken(session: Session, run_id: str) -> set[int]:
    return {
        int(key.removeprefix("msg:"))
        for key in transcript_keys(session, run_id)
        if key.startswith("msg:")
    }
