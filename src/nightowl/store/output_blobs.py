"""Whose each large tool output is, and the trust of where it came from.

The blob store names content by its hash, so the same bytes may be one user's own words and
another's web page: the record is per owner, and the least trusted source wins.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.tables import OutputBlob

_RANK = {"untrusted": 0, "agent": 1, "owner": 2}


def record_output_blob(session: Session, owner_id: str, reference: str, trust: str) -> None:
    """Remember that `owner_id` has the output `reference`, of trust `trust`."""
    row = session.get(OutputBlob, (owner_id, reference))
    if row is None:
        session.add(OutputBlob(owner_id=owner_id, reference=reference, trust=trust))
    elif _RANK.get(trust, 0) < _RANK.get(row.trust, 0):
        row.trust = trust
    session.flush()


def output_blob_trust(session: Session, owner_id: str, reference: str) -> str | None:
    """The trust of `owner_id`'s output `reference`, or None when it is not theirs."""
    return session.scalar(
        select(OutputBlob.trust).where(
            OutputBlob.owner_id == owner_id, OutputBlob.reference == reference
        )
    )
