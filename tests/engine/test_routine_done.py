"""A routine's postcondition (SQLite and PostgreSQL): when the turn that took a run's message
ends without what done means — no message sent to the owner, or the report file not written —
the run is `failed: not done …` with its message kept, and the next run's notice says so; a
run that did it stays `ran`. An approval question is not a message sent, and a file written
before the run, or reached through a link out of the home, does not count."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import update

from nightowl.engine.batches import take_turn_batch
from nightowl.engine.routine_done import check_runs
from nightowl.engine.routine_firings import RoutineFirings
from nightowl.harness.done_when import DoneWhen
from nightowl.router.router import Router
from nightowl.store.conversations import create_conversation, messages_after
from nightowl.store.database import Database
from nightowl.store.outbox import deliver_to_user
from nightowl.store.routine_firings import firings_of
from nightowl.store.routines import create_routine, get_routine
from nightowl.store.tables import Routine
from nightowl.store.turns import finish_turn
from nightowl.store.users import ensure_owner
from tests.store.test_store import RecordingQueue

T0 = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
EVERY_5 = "*/5 * * * *"


def _routine(database: Database, done_when: DoneWhen) -> tuple[str, str]:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
        routine = create_routine(
            session,
            owner.id,
            conversation.id,
            name="digest",
            prompt="send me the digest",
            cron=EVERY_5,
            timezone="UTC",
            created_by="owner",
            done_when=done_when,
        )
        session.execute(
            update(Routine)
            .where(Routine.id == routine.id)
            .values(accounted_until=T0, created_at=T0 - timedelta(days=1))
        )
        return routine.id, owner.id


class Run:
    """Fires due times and plays the turn that takes each one's message."""

    def __init__(self, database: Database, routine_id: str, homes: Path) -> None:
        self.database = database
        self.routine_id = routine_id
        self.homes = homes
        self.queue = RecordingQueue()
        router = Router(database, self.queue)
        self.firings = RoutineFirings(database, router, lambda: T0 + timedelta(days=2))

    def fire(self, due: datetime, act: str = "") -> str:
        """Fire `due`; its turn takes the message, does `act` (send | ask | nothing), ends."""
        assert self.firings.fire_due(self.routine_id, due) == 1
        turn = self.queue.woken[-1]
        with self.database.write() as session:
            take_turn_batch(session, turn.id)
            if act in ("send", "ask"):
                ask = {"controls": {"ask": "approval", "buttons": []}} if act == "ask" else {}
                deliver_to_user(
                    session,
                    turn.conversation_id,
                    key=f"out:{turn.id}:0.0",
                    body="Here is the digest." if act == "send" else "Approve this?",
                    turn_id=turn.id,
                    meta=ask,
                )
            finish_turn(session, turn.id, status="done")
            check_runs(session, turn.id, self.homes)
        return turn.id

    def outcomes(self) -> list[tuple[str, str]]:
        with self.database.read() as session:
            return [(f.outcome, f.reason) for f in reversed(firings_of(session, self.routine_id))]

    def notices(self) -> list[str]:
        with self.database.read() as session:
            conversation = get_routine(session, self.routine_id).conversation_id
            return [m.body for m in messages_after(session, conversation, 0) if m.role == "notice"]


def test_a_run_that_sent_nothing_is_not_done_and_the_next_run_is_told(
    database: Database, tmp_path: Path
) -> None:
    routine_id, _ = _routine(database, DoneWhen(kind="sent"))
    run = Run(database, routine_id, tmp_path)
    due = [T0 + timedelta(minutes=m) for m in (5, 10, 15, 20)]
    first = run.fire(due[0], act="")  # the turn ended without a word to the owner
    run.fire(due[1], act="ask")  # only a question asking for approval
    run.fire(due[2], act="send")
    run.fire(due[3], act="send")
    reason = "not done: the run ended without sending you a message"
    assert run.outcomes() == [("failed", reason), ("failed", reason), ("ran", ""), ("ran", "")]
    notices = run.notices()
    assert "previous run" not in notices[0]
    assert f"The previous run (due {due[0].isoformat()}) was {reason}" in notices[1]
    assert f"The previous run (due {due[1].isoformat()}) was {reason}" in notices[2]
    assert "previous run" not in notices[3]  # the one before it was done
    with database.read() as session:
        listed = firings_of(session, routine_id)
    # The failed run keeps its message and turn: the owner can open what it did.
    assert listed[-1].message_id is not None and listed[-1].turn_id == first


def test_a_file_postcondition_wants_the_file_written_during_the_run_in_the_home(
    database: Database, tmp_path: Path
) -> None:
    routine_id, owner_id = _routine(database, DoneWhen(kind="file", path="reports/today.md"))
    home = tmp_path / owner_id
    (home / "reports").mkdir(parents=True)
    report = home / "reports" / "today.md"
    run = Run(database, routine_id, tmp_path)
    due = [T0 + timedelta(minutes=m) for m in (5, 10, 15)]

    run.fire(due[0])  # no file at all
    report.write_text("old")
    old = (due[1] - timedelta(hours=1)).timestamp()
    os.utime(report, (old, old))  # written before the run's due time
    run.fire(due[1])
    assert [o for o, _ in run.outcomes()] == ["failed", "failed"]
    assert run.outcomes()[0][1] == "not done: the run ended without writing reports/today.md"

    report.unlink()
    outside = tmp_path / "elsewhere.md"
    outside.write_text("not in the home")
    report.symlink_to(outside)  # fresh, but outside the home
    run.fire(due[2])
    assert [o for o, _ in run.outcomes()] == ["failed"] * 3

    report.unlink()
    report.write_text("# today")  # written now, after every due time above
    run.fire(due[2] + timedelta(minutes=5))
    assert run.outcomes()[-1] == ("ran", "")


def test_a_routine_without_a_postcondition_is_never_marked_not_done(
    database: Database, tmp_path: Path
) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
        routine = create_routine(
            session,
            owner.id,
            conversation.id,
            name="plain",
            prompt="p",
            cron=EVERY_5,
            timezone="UTC",
            created_by="owner",
        )
        session.execute(update(Routine).where(Routine.id == routine.id).values(accounted_until=T0))
    run = Run(database, routine.id, tmp_path)
    run.fire(T0 + timedelta(minutes=5))
    assert run.outcomes() == [("ran", "")]


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        ({"kind": "file"}, "needs a path"),
        ({"kind": "file", "path": "/etc/passwd"}, "not absolute"),
        ({"kind": "file", "path": "a/../../b"}, "no '..'"),
        ({"kind": "file", "path": "a\nb"}, "one line"),
        ({"kind": "sent", "path": "x"}, "takes no path"),
        ({"kind": "done"}, "'sent' or 'file'"),
        ({"kind": "sent", "when": "now"}, "Extra inputs"),
    ],
)
def test_a_postcondition_that_cannot_be_checked_is_refused(
    given: dict[str, str], wanted: str
) -> None:
    with pytest.raises(ValidationError, match=wanted):
        DoneWhen.model_validate(given)
