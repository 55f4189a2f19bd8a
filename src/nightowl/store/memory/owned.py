"""A user's memory item by its id: another user's item answers as one that does not exist."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.orm import Session

from nightowl.store.errors import NotFound
from nightowl.store.memory_tables import MemoryFact, MemoryNote, Skill, WorkLogEntry

Row = TypeVar("Row", MemoryFact, MemoryNote, Skill, WorkLogEntry)


def owned_item(session: Session, table: type[Row], item_id: str, user_id: str, missing: str) -> Row:
    """The user's row of `table` with this id; NotFound saying `missing` when there is none
    or it is someone else's."""
    row = session.get(table, item_id)
    if row is None or row.user_id != user_id:
        raise NotFound(missing)
    return row
