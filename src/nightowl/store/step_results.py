"""Results of durable steps that write to the store, kept with their writes.

DBOS records a step's output in its own database after the step returns. A step that commits
to the app store first and dies before DBOS records it is run again on recovery; without this
record the re-run would see its own earlier writes (a model reply already in the history) and
do something else. So each such step saves what it returns in the transaction that commits its
work, under a key derived from its workflow and position, and a re-run returns that.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nightowl.store.tables import StepResult, utcnow


class StepTaken(Exception):
    """Another execution of the same run recorded this step first: a worker declared dead
    while it was alive and the worker that took over its runs both ran it. This execution's
    writes roll back with its transaction; the step is replayed from that record."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the step {key} was recorded by another execution of its run")
        self.key = key


@dataclass(frozen=True)
class Recorded:
    """A step's committed result (a value of its own, possibly None)."""

    value: Any


def recorded_result(session: Session, key: str) -> Recorded | None:
    """What the step `key` returned when its work was committed, or None if it never was."""
    found = session.connection().execute(_RECORDED, {"key": key}).first()
    return None if found is None else Recorded(found[0])


def forget_results_before(session: Session, cutoff: datetime) -> int:
    """Delete step results older than `cutoff`; how many. Past the retention period their
    workflows' own records are gone too, so no step can run again to ask for them."""
    deleted = session.execute(delete(StepResult).where(StepResult.created_at < cutoff))
    return int(deleted.rowcount or 0)  # type: ignore[attr-defined]


def record_result(session: Session, key: str, result: Any) -> None:
    """Keep what the step `key` returns; call it in the transaction that commits its work."""
    session.flush()  # Core on the session's connection: what the session holds goes first
    try:
        session.connection().execute(
            _RECORD, {"key": key, "result": result, "created_at": utcnow()}
        )
    except IntegrityError as error:  # the key is the table's only constraint
        raise StepTaken(key) from error


# Prebuilt (Core, on the session's connection): every step that writes runs both, and a
# statement built once is compiled once.
_RECORDED = select(StepResult.result).where(StepResult.key == bindparam("key"))
_RECORD = insert(StepResult)
