"""Provenance of what the agent writes to keep: a note, a skill or a routine the agent writes in
a turn whose context holds outside text is itself outside text (untrusted), so no summary or
rewording launders it: it is shown fenced later and taints the turn that reads it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from nightowl.safety.policy import is_tainted
from nightowl.store.transcript import load_transcript


def written_trust(session: Session, conversation_id: str, clean: str = "agent") -> str:
    """The trust of text the agent writes now in the conversation: `untrusted` once its
    context holds outside text (what memory showed it included: the replies record it), else
    `clean`."""
    history = load_transcript(session, conversation_id)
    return "untrusted" if is_tainted(history) else clean
