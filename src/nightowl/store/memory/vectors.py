"""Embeddings of the memory index in the store (`memory_vectors`): float32 blobs by item, read
per user; memory/semantic.py embeds and ranks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from nightowl.store.memory_tables import MemoryIndexRow, MemoryVector

# An item waiting for its vector: kind, item id, user id, body.
Pending = tuple[str, str, str, str]


class StoredVector(NamedTuple):
    """One item's embedding as stored: float32 bytes."""

    kind: str
    item_id: str
    vector: bytes


class IndexedItem(NamedTuple):
    """An item of the memory index: what it says, when, and until when (None: for good)."""

    kind: str
    item_id: str
    body: str
    at: datetime
    expires_at: datetime | None


def vectors_stamp(session: Session, user_id: str) -> tuple[int, int] | None:
    """(how many vectors, the newest's id) of the user: it changes whenever a vector is added
    or removed; None when the user has none."""
    count, newest = session.execute(
        select(func.count(MemoryVector.id), func.max(MemoryVector.id)).where(
            MemoryVector.user_id == user_id
        )
    ).one()
    return (int(count), int(newest)) if count else None


def user_vectors(session: Session, user_id: str) -> list[StoredVector]:
    """Every vector of the user, in no particular order."""
    rows = session.execute(
        select(MemoryVector.kind, MemoryVector.item_id, MemoryVector.vector).where(
            MemoryVector.user_id == user_id
        )
    )
    return [StoredVector(str(k), str(i), bytes(v)) for k, i, v in rows]


def items_without_vectors(
    session: Session, user_id: str | None = None, limit: int = 256
) -> list[Pending]:
    """Up to `limit` indexed items (of `user_id`, or anyone's) that have no vector yet,
    oldest first."""
    query = (
        select(
            MemoryIndexRow.kind,
            MemoryIndexRow.item_id,
            MemoryIndexRow.user_id,
            MemoryIndexRow.body,
        )
        .outerjoin(
            MemoryVector,
            and_(
                MemoryVector.kind == MemoryIndexRow.kind,
                MemoryVector.item_id == MemoryIndexRow.item_id,
            ),
        )
        .where(MemoryVector.item_id.is_(None))
        .order_by(MemoryIndexRow.id)
        .limit(limit)
    )
    if user_id is not None:
        query = query.where(MemoryIndexRow.user_id == user_id)
    return [(str(k), str(i), str(u), str(b)) for k, i, u, b in session.execute(query)]


def write_vectors(
    session: Session, items: Sequence[Pending], vectors: Sequence[bytes], model: str
) -> int:
    """Write the vectors of `items` (embedded by `model` from the bodies they were read
    with), but not of an item edited, deleted or embedded since; how many were written."""
    ids = [item_id for _, item_id, _, _ in items]
    bodies = {
        (str(k), str(i)): str(b)
        for k, i, b in session.execute(
            select(MemoryIndexRow.kind, MemoryIndexRow.item_id, MemoryIndexRow.body).where(
                MemoryIndexRow.item_id.in_(ids)
            )
        )
    }
    embedded = {
        (str(k), str(i))
        for k, i in session.execute(
            select(MemoryVector.kind, MemoryVector.item_id).where(MemoryVector.item_id.in_(ids))
        )
    }
    written = 0
    for (kind, item_id, owner, body), vector in zip(items, vectors, strict=True):
        key = (kind, item_id)
        if bodies.get(key) != body or key in embedded:
            continue
        session.add(
            MemoryVector(kind=kind, item_id=item_id, user_id=owner, model=model, vector=vector)
        )
        written += 1
    session.flush()
    return written


def indexed_items(session: Session, user_id: str, item_ids: Sequence[str]) -> list[IndexedItem]:
    """The user's indexed items among `item_ids` (expired ones too), in no particular order."""
    rows = session.execute(
        select(
            MemoryIndexRow.kind,
            MemoryIndexRow.item_id,
            MemoryIndexRow.body,
            MemoryIndexRow.at,
            MemoryIndexRow.expires_at,
        ).where(
            MemoryIndexRow.user_id == user_id,
            MemoryIndexRow.item_id.in_(list(item_ids)),
        )
    )
    return [IndexedItem(*row) for row in rows]
