"""When a routine's run ends: was it done? (the postcondition is harness/done_when.py)

Called in the transaction that records the end of a turn, so the firing's outcome and the
turn's end are one write: a run whose turn took its message and ended without what done means
becomes `failed: not done …`; the next run's notice says so (engine/routine_firings.py).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session

from nightowl.harness.done_when import DoneWhen
from nightowl.store.routine_firings import mark_not_done, runs_taken_by, sent_by


def file_written(homes_dir: Path, owner_id: str, relative: str, since: datetime) -> bool:
    """Whether the file exists in the owner's home (not through a link out of it) and was
    written at or after `since`."""
    home = (homes_dir / owner_id).resolve()
    path = (home / relative).resolve()
    if not path.is_relative_to(home) or not path.is_file():
        return False
    return path.stat().st_mtime >= since.timestamp()


def _done(
    session: Session,
    turn_id: str,
    homes_dir: Path,
    owner_id: str,
    due: datetime,
    done_when: DoneWhen,
) -> bool:
    if done_when.kind == "sent":
        return sent_by(session, turn_id)
    assert done_when.path is not None  # a file postcondition always has one
    return file_written(homes_dir, owner_id, done_when.path, due)


def check_runs(session: Session, turn_id: str, homes_dir: Path) -> int:
    """Mark the runs the ended turn did not finish `failed: not done …`; how many."""
    failed = 0
    for run in runs_taken_by(session, turn_id):
        if not _done(session, turn_id, homes_dir, run.owner_id, run.due, run.done_when):
            mark_not_done(session, run.routine_id, run.due, run.done_when.missing())
            failed += 1
    return failed
