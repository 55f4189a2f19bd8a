"""What memory puts into a model call: the profile section for a new pin, and the newest
message's note (profile changes since the pin, relevant and recent work log, live notes).
Memory made from outside text is fenced in both (see memory/render.py)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy.orm import Session

from nightowl.memory.facts import list_facts
from nightowl.memory.notes import live_notes
from nightowl.memory.render import (
    ProfileItem,
    RecallItem,
    RoutineLine,
    SkillLine,
    profile_changes,
    render_profile,
    render_recall,
)
from nightowl.memory.search import full_text_search
from nightowl.memory.skills import skill_lines
from nightowl.memory.worklog import LogEntryInfo, entries_by_id, mark_used, recent_entries
from nightowl.messages import Entry
from nightowl.store.conversations import owner_of
from nightowl.store.routines import list_routines
from nightowl.store.transcript import transcript_turns

MAX_LOG_ENTRIES = 30
QUERY_ENTRIES = 3  # the newest user entries make the query for relevant work-log entries


def current_profile(session: Session, user_id: str) -> str:
    """The memory section as a new pin would take it now."""
    facts = [ProfileItem(f.text, f.trust) for f in list_facts(session, user_id)]
    # Every model call checks the profile: only the skills' lines, never their bodies.
    skills = [SkillLine(*line) for line in skill_lines(session, user_id)]
    routines = [
        RoutineLine(r.name, r.cron, r.timezone, r.status, r.prompt, r.trust)
        for r in list_routines(session, user_id)
        if r.status != "pending_approval"
    ]
    return render_profile(facts, skills, routines)


def memory_texts(session: Session, user_id: str) -> list[str]:
    """What memory may show a model call of the user: facts, live notes and the recent work
    log (the private texts a request must not carry out, safety/data_flow.py)."""
    facts = [f.text for f in list_facts(session, user_id)]
    notes = [n.text for n in live_notes(session, user_id)]
    log = [e.summary for e in recent_entries(session, user_id, limit=MAX_LOG_ENTRIES)]
    return facts + notes + log


def profile_for_pin(session: Session, conversation_id: str) -> str:
    """The profile section for the pin of `conversation_id` ("" for an unknown one)."""
    owner = owner_of(session, conversation_id)
    return current_profile(session, owner) if owner else ""


def recall_log(
    session: Session,
    user_id: str,
    history: Sequence[Entry],
    limit: int = MAX_LOG_ENTRIES,
    recent: bool = True,
    shown_turns: Collection[str] = (),
) -> list[LogEntryInfo]:
    """Up to `limit` work-log entries: those relevant to the newest user messages first
    (their use is counted), then (`recent`) the most recent; newest first. Not those of
    `shown_turns`, turns whose own entries the history holds (the log would repeat them)."""
    query = " ".join(e.text for e in [e for e in history if e.kind == "user"][-QUERY_ENTRIES:])
    wider = limit + len(shown_turns)
    hits = full_text_search(session, user_id, query, kinds=["log"], limit=wider)
    relevant = [
        e
        for e in entries_by_id(session, user_id, [h.item_id for h in hits])
        if e.turn_id not in shown_turns
    ][:limit]
    mark_used(session, user_id, [e.id for e in relevant])
    chosen = {e.id: e for e in relevant}
    for entry in recent_entries(session, user_id, limit=wider) if recent else []:
        if len(chosen) >= limit:
            break
        if entry.turn_id not in shown_turns:
            chosen.setdefault(entry.id, entry)
    return sorted(chosen.values(), key=lambda e: (e.created_at, e.id), reverse=True)


def memory_note(
    session: Session,
    conversation_id: str,
    pinned_profile: str,
    history: Sequence[Entry],
    log_entries: int = MAX_LOG_ENTRIES,
    recent: bool = True,
    current: str | None = None,
) -> str:
    """The newest message's memory note ("" when there is nothing to say), with up to
    `log_entries` work-log entries (`recent`: not only relevant ones). Call it in a write
    transaction: the work-log entries it finds relevant count as used. `current`: the
    owner's profile as it is now, when the caller has it (it pinned it in this transaction)."""
    owner = owner_of(session, conversation_id)
    if owner is None:
        return ""
    now = current if current is not None else current_profile(session, owner)
    changes = profile_changes(pinned_profile, now)
    log = [
        RecallItem(e.created_at, e.summary, e.trust)
        for e in recall_log(
            session, owner, history, log_entries, recent, transcript_turns(session, conversation_id)
        )
    ]
    notes = [RecallItem(n.expires_at, n.text, n.trust) for n in live_notes(session, owner)]
    return "\n\n".join(part for part in (changes, render_recall(log, notes)) if part)
