"""Profile facts: at most 100 live facts and 4,000 characters per user, enforced here.

A write that would pass a bound raises `ProfileFull`; nothing is ever cut to fit. Archived
facts leave the profile (and the bounds) but stay searchable. The facts are stored by
store/memory/facts.py; its readers are offered here too, so callers have one place to go.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from nightowl.safety.policy import SECRET_REF
from nightowl.store.errors import Invalid
from nightowl.store.memory.facts import (
    FactInfo,
    Source,
    delete_fact,
    get_fact,
    insert_fact,
    list_facts,
    lock_profile,
    mark_used,
    profile_size,
    set_fact_archived,
    update_fact,
)
from nightowl.store.memory_versions import OWNER, Author

__all__ = [
    "MAX_FACTS",
    "MAX_FACT_CHARS",
    "MAX_PROFILE_CHARS",
    "NO_SECRETS",
    "TRUST_LEVELS",
    "FactInfo",
    "ProfileFull",
    "Source",
    "add_fact",
    "author_of",
    "clean_text",
    "get_fact",
    "list_facts",
    "mark_used",
    "profile_size",
    "remove_fact",
    "replace_fact",
    "room_for",
    "set_archived",
]

MAX_FACTS = 100
MAX_PROFILE_CHARS = 4_000
MAX_FACT_CHARS = 500
TRUST_LEVELS = ("owner", "member", "untrusted")


class ProfileFull(Invalid):
    """Adding or growing a fact would pass the profile's bounds."""


NO_SECRETS = (
    "a fact may not hold a secret reference ({{secret:NAME}}): memory is shown in prompts, "
    "so name the secret without the braces"
)


def clean_text(text: str) -> str:
    """A fact's text on one line, checked for length (Invalid with what to do)."""
    cleaned = " ".join(text.split())
    if not cleaned:
        raise Invalid("a fact needs some text")
    if len(cleaned) > MAX_FACT_CHARS:
        raise Invalid(
            f"a fact is at most {MAX_FACT_CHARS} characters (this one has {len(cleaned)}); "
            "say it shorter or split it"
        )
    if SECRET_REF.search(cleaned):
        raise Invalid(NO_SECRETS)
    return cleaned


def room_for(session: Session, user_id: str, chars: int, replacing: int = 0) -> bool:
    """Whether a fact of `chars` characters fits (in place of one of `replacing` characters)."""
    count, used = profile_size(session, user_id)
    new_count = count if replacing else count + 1
    return new_count <= MAX_FACTS and used - replacing + chars <= MAX_PROFILE_CHARS


def _check_room(session: Session, user_id: str, chars: int, replacing: int = 0) -> None:
    lock_profile(session, user_id)
    if not room_for(session, user_id, chars, replacing):
        count, used = profile_size(session, user_id)
        raise ProfileFull(
            f"the profile is full ({count} of {MAX_FACTS} facts, {used} of "
            f"{MAX_PROFILE_CHARS} characters); remove or shorten a fact first"
        )


def author_of(source: Source | None, who: str) -> Author:
    """The author of a change, from where the fact came from."""
    if source is None:
        return Author(who, trust="owner" if who == "owner" else "agent")
    return Author(who, source.turn_id, source.conversation_id, source.message_id, source.trust)


def add_fact(
    session: Session,
    user_id: str,
    text: str,
    source: Source,
    created_by: str = "agent",
    *,
    by: Author | None = None,
) -> FactInfo:
    """Add a fact to the user's profile (ProfileFull when it would not fit); a version
    records it (`by`: who, from what; by default the creator and the source)."""
    if source.trust not in TRUST_LEVELS:
        raise Invalid(f"trust must be one of {', '.join(TRUST_LEVELS)}")
    cleaned = clean_text(text)
    _check_room(session, user_id, len(cleaned))
    return insert_fact(
        session, user_id, cleaned, source, created_by, by or author_of(source, created_by)
    )


def replace_fact(
    session: Session,
    user_id: str,
    fact_id: str,
    text: str,
    source: Source | None = None,
    *,
    by: Author | None = None,
) -> FactInfo:
    """Rewrite a fact; a new source (and its trust) replaces the old one when given. The
    version keeps what it said before (`by`: by default the owner for an owner's source)."""
    current = get_fact(session, user_id, fact_id)
    cleaned = clean_text(text)
    if not current.archived:
        _check_room(session, user_id, len(cleaned), replacing=len(current.text))
    owners = source is not None and source.trust == "owner" and not source.turn_id
    by = by or author_of(source, "owner" if owners else "agent")
    return update_fact(session, user_id, fact_id, cleaned, source, by)


def remove_fact(session: Session, user_id: str, fact_id: str, *, by: Author = OWNER) -> FactInfo:
    """Delete a fact (its versions keep what it said: a revert brings it back); returns
    what it was."""
    return delete_fact(session, user_id, fact_id, by)


def set_archived(
    session: Session, user_id: str, fact_id: str, archived: bool, *, by: Author = OWNER
) -> FactInfo:
    """Archive a fact (out of the profile, still searchable) or bring it back (if it fits)."""
    current = get_fact(session, user_id, fact_id)
    if not archived and current.archived:
        _check_room(session, user_id, len(current.text))
    return set_fact_archived(session, user_id, fact_id, archived, by)
