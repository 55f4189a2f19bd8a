"""Every due time of a routine is accounted for (SQLite and PostgreSQL): missed ones are caught
up by the routine's policy, none is lost or run twice across restarts, two workers and clock
jumps, and each outcome is recorded."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from nightowl.engine.routine_firings import RoutineFirings
from nightowl.harness.firings import Firing, due_times, plan
from nightowl.harness.guard import GuardLimits
from nightowl.router.router import Router
from nightowl.store.conversations import create_conversation, messages_after
from nightowl.store.database import Database
from nightowl.store.errors import Invalid, StoreError
from nightowl.store.push import Settings, save_settings
from nightowl.store.routine_firings import LEASE_S, claim, firings_of, outcome_counts
from nightowl.store.routines import create_routine, get_routine, set_status
from nightowl.store.tables import Routine, RoutineFiring, Turn, utcnow
from nightowl.store.transcript import finish_model_call, start_model_call
from nightowl.store.users import ensure_owner
from tests.store.test_store import RecordingQueue

T0 = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)  # accounted until here
HOURLY = "0 * * * *"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _routine(
    database: Database, catch_up: str = "latest", cron: str = HOURLY, quiet_hours: str = "run"
) -> str:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
        routine = create_routine(
            session,
            owner.id,
            conversation.id,
            name="digest",
            prompt="summarise the overnight mail",
            cron=cron,
            timezone="UTC",
            created_by="owner",
            catch_up=catch_up,
            quiet_hours=quiet_hours,
        )
        session.execute(
            update(Routine)
            .where(Routine.id == routine.id)
            .values(accounted_until=T0, created_at=T0 - timedelta(days=1))
        )
        return routine.id


def _messages(database: Database, routine_id: str) -> list[str]:
    with database.read() as session:
        conversation_id = get_routine(session, routine_id).conversation_id
        return [m.body for m in messages_after(session, conversation_id, 0)]


def _outcomes(database: Database, routine_id: str) -> list[tuple[str, str, str, int]]:
    with database.read() as session:
        rows = reversed(firings_of(session, routine_id))
        return [(f.due_at.strftime("%H:%M"), f.outcome, f.reason, f.missed) for f in rows]


def _firings(database: Database, clock: Clock) -> RoutineFirings:
    router = Router(database, RecordingQueue())
    return RoutineFirings(database, router, clock)


def test_latest_one_firing_says_three_were_missed(database: Database) -> None:
    routine_id = _routine(database, "latest")
    clock = Clock(T0 + timedelta(hours=3, minutes=10))  # 10:00, 11:00, 12:00 passed while down
    firings = _firings(database, clock)
    assert firings.catch_up() == 1
    [body] = _messages(database, routine_id)
    assert body.startswith("Routine 'digest' (2026-12-05T12:00:00+00:00)")
    assert "3 due time(s) of this routine passed while it could not run" in body
    superseded = "superseded: caught up by the firing due 2026-12-05T12:00:00+00:00"
    assert _outcomes(database, routine_id) == [
        ("10:00", "skipped", superseded, 0),
        ("11:00", "skipped", superseded, 0),
        ("12:00", "ran", "", 3),
    ]
    # Started again (another restart, or a second worker): nothing new.
    assert firings.catch_up() == 0
    # The scheduler's next firing is on time: it runs alone and says nothing about misses.
    clock.now = T0 + timedelta(hours=3, minutes=30, seconds=1)
    assert firings.fire_due(routine_id, datetime(2026, 12, 5, 13, 0, tzinfo=UTC)) == 1
    assert "Caught up" not in _messages(database, routine_id)[-1]
    # The same due time fired again (a clock that jumped back, a redelivery): not run twice.
    assert firings.fire_due(routine_id, datetime(2026, 12, 5, 13, 0, tzinfo=UTC)) == 0
    assert len(_messages(database, routine_id)) == 2
    with database.read() as session:
        assert outcome_counts(session, [routine_id])[routine_id] == {
            "ran": 2,
            "skipped": 2,
            "failed": 0,
            "pending": 0,
        }


def test_all_fires_each_missed_due_time_late_and_none_records_them_skipped(
    database: Database,
) -> None:
    every = _routine(database, "all")
    never = _routine(database, "none")
    firings = _firings(database, Clock(T0 + timedelta(hours=3, minutes=10)))
    assert firings.catch_up() == 3
    bodies = _messages(database, every)
    assert [b.split(")")[0] for b in bodies] == [
        f"Routine 'digest' (2026-12-05T{h}:00:00+00:00" for h in (10, 11, 12)
    ]
    assert all("[Late: this due time passed" in b for b in bodies)
    assert [o[:2] for o in _outcomes(database, every)] == [
        ("10:00", "ran"),
        ("11:00", "ran"),
        ("12:00", "ran"),
    ]
    assert _messages(database, never) == []
    assert {o[1:] for o in _outcomes(database, never)} == {
        ("skipped", "missed: it could not run at its time (catch_up none)", 0)
    }
    assert len(_outcomes(database, never)) == 3


def test_a_due_time_missed_while_running_is_caught_up_by_the_next_firing(
    database: Database,
) -> None:
    # The scheduler skipped 10:00 (stalled, or the clock jumped forward); 11:00 fires on time.
    routine_id = _routine(database, "latest")
    clock = Clock(datetime(2026, 12, 5, 11, 0, 0, 300_000, tzinfo=UTC))
    firings = _firings(database, clock)
    assert firings.fire_due(routine_id, datetime(2026, 12, 5, 11, 0, tzinfo=UTC)) == 1
    [body] = _messages(database, routine_id)
    assert "1 due time(s) of this routine passed" in body
    assert [o[:2] for o in _outcomes(database, routine_id)] == [
        ("10:00", "skipped"),
        ("11:00", "ran"),
    ]


def test_two_workers_catching_up_at_once_fire_each_due_time_once(database_url: str) -> None:
    first, second = Database(database_url), Database(database_url)
    try:
        from nightowl.store.migrate import upgrade

        upgrade(first)
        routine_id = _routine(first, "all")
        clock = Clock(T0 + timedelta(hours=3, minutes=10))
        workers = [_firings(first, clock), _firings(second, clock)]
        ran: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def run(worker: RoutineFirings) -> None:
            try:
                start.wait()
                ran.append(worker.catch_up())
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(_messages(first, routine_id)) == 3
        assert [o[1] for o in _outcomes(first, routine_id)] == ["ran", "ran", "ran"]
        assert sum(ran) == 3  # each due time run by exactly one of them
    finally:
        first.dispose()
        second.dispose()


def test_a_firing_cut_short_between_its_claim_and_its_message_runs_at_the_next_start(
    database: Database,
) -> None:
    routine_id = _routine(database, "latest")
    due = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    with database.write() as session:  # what a killed process left behind
        assert claim(session, routine_id, [Firing(due, "pending")]) == [Firing(due, "pending")]
        # Claimed again (a second worker's scheduler): not the second one's to run.
        assert claim(session, routine_id, [Firing(due, "pending")]) == []
    firings = _firings(database, Clock(T0 + timedelta(minutes=45)))
    # Within its lease the claim may still be running in another worker: left alone.
    assert firings.catch_up() == 0 and _messages(database, routine_id) == []
    with database.write() as session:  # the lease runs out
        session.execute(
            update(RoutineFiring).values(recorded_at=utcnow() - timedelta(seconds=LEASE_S + 1))
        )
    assert firings.catch_up() == 1
    assert len(_messages(database, routine_id)) == 1
    assert _outcomes(database, routine_id)[0][:2] == ("10:00", "ran")


def test_a_paused_routine_records_its_due_times_skipped_and_does_not_catch_them_up(
    database: Database,
) -> None:
    routine_id = _routine(database, "all")
    with database.write() as session:
        owner = get_routine(session, routine_id).owner_id
        set_status(session, routine_id, owner, "paused")
        set_status(session, routine_id, owner, "active", now=T0 + timedelta(hours=2, minutes=5))
    firings = _firings(database, Clock(T0 + timedelta(hours=2, minutes=6)))
    assert firings.catch_up() == 0
    assert _messages(database, routine_id) == []
    assert _outcomes(database, routine_id) == [
        ("10:00", "skipped", "paused", 0),
        ("11:00", "skipped", "paused", 0),
    ]


def test_a_firing_the_router_refuses_is_failed_with_why(database: Database) -> None:
    class Refusing:
        def accept(self, _incoming: object) -> None:
            raise StoreError("the conversation is archived")

    routine_id = _routine(database, "latest")
    refusing = Refusing()
    firings = RoutineFirings(
        database,
        refusing,  # type: ignore[arg-type]
        Clock(T0 + timedelta(minutes=40)),
    )
    assert firings.catch_up() == 0
    assert _outcomes(database, routine_id) == [
        ("10:00", "failed", "the conversation is archived", 1),
    ]


def test_an_unknown_catch_up_policy_is_refused_with_the_choices(database: Database) -> None:
    with pytest.raises(Invalid, match="catch_up must be one of latest, all, none"):
        _routine(database, "sometimes")


def test_due_times_of_a_long_outage_are_counted_not_listed_one_by_one() -> None:
    start = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
    dues = due_times("* * * * * *", "UTC", start, start + timedelta(hours=1))
    assert len(dues.listed) == 1_000 and dues.count == 3_600
    firings = plan(dues, None, "latest")
    assert firings[0].outcome == "skipped" and "2,600 older due times" in firings[0].reason
    assert firings[-1].missed == 3_600 and len(firings) == 1_001
    berlin = due_times("0 8 * * 1-5", "Europe/Berlin", start, start + timedelta(days=4, hours=12))
    assert [d.isoformat() for d in berlin.listed] == [
        "2026-12-07T07:00:00+00:00",
        "2026-12-08T07:00:00+00:00",
        "2026-12-09T07:00:00+00:00",
    ]


def _spent(database: Database, routine_id: str, usd: float, at: datetime) -> None:
    """A turn of the routine that spent `usd` on the model at `at`."""
    with database.write() as session:
        conversation_id = get_routine(session, routine_id).conversation_id
        turn_id = f"turn_spent_{int(at.timestamp())}"
        session.add(
            Turn(
                id=turn_id,
                conversation_id=conversation_id,
                status="done",
                priority=1,
                routine_id=routine_id,
            )
        )
        session.flush()
        call = start_model_call(session, conversation_id, turn_id, 0, "scripted", started_at=at)
        finish_model_call(session, call, {"input_tokens": 900, "output_tokens": 100}, cost_usd=usd)


def test_a_routine_over_its_budget_skips_its_due_times_until_the_day_is_over(
    database: Database,
) -> None:
    routine_id = _routine(database, "latest")
    _spent(database, routine_id, 0.75, T0)  # today, under the budget of 1.00
    clock = Clock(T0 + timedelta(minutes=31))
    router = Router(database, RecordingQueue())
    limits = GuardLimits(routine_budget_usd=1.0)
    firings = RoutineFirings(database, router, clock, limits=limits)
    assert firings.fire_due(routine_id, datetime(2026, 12, 5, 10, 0, tzinfo=UTC)) == 1
    _spent(database, routine_id, 0.5, T0 + timedelta(minutes=35))  # now 1.25 of 1.00
    clock.now = T0 + timedelta(hours=1, minutes=31)
    assert firings.fire_due(routine_id, datetime(2026, 12, 5, 11, 0, tzinfo=UTC)) == 0
    assert len(_messages(database, routine_id)) == 1  # no message, so no turn, no model call
    over = "budget: the routine spent $1.25 today of its $1.00 (NIGHTOWL_ROUTINE_BUDGET_USD)"
    assert _outcomes(database, routine_id) == [
        ("10:00", "ran", "", 0),
        ("11:00", "skipped", over, 0),
    ]
    # The owner's budget over all their conversations counts too (a member opening a new
    # conversation is no way round it) ...
    everyone = RoutineFirings(database, router, clock, limits=GuardLimits(user_budget_usd=1.0))
    clock.now = T0 + timedelta(hours=2, minutes=31)
    assert everyone.fire_due(routine_id, datetime(2026, 12, 5, 12, 0, tzinfo=UTC)) == 0
    assert _outcomes(database, routine_id)[-1][2].startswith(
        "budget: the owner's conversations used $1.25"
    )
    # ... and the next day (UTC) it runs again.
    clock.now = datetime(2026, 12, 6, 0, 0, 1, tzinfo=UTC)
    assert firings.fire_due(routine_id, datetime(2026, 12, 6, 0, 0, tzinfo=UTC)) == 1
    with database.read() as session:
        counts = outcome_counts(session, [routine_id])[routine_id]
    assert counts["ran"] == 2 and counts["skipped"] >= 2


def _quiet(database: Database, start: str, end: str, timezone: str = "UTC") -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        save_settings(session, owner.id, Settings(start, end, timezone))


def test_a_routine_that_skips_quiet_hours_records_those_due_times_skipped(
    database: Database,
) -> None:
    # Quiet from 22:00 to 10:30 in Berlin (21:00 to 09:30 UTC in December).
    _quiet(database, "22:00", "10:30", "Europe/Berlin")
    skipping = _routine(database, quiet_hours="skip")
    running = _routine(database)  # the default: it runs, its messages wait like any push
    clock = Clock(T0 + timedelta(minutes=30, seconds=1))  # 10:00:01 UTC, 11:00 in Berlin
    firings = _firings(database, clock)
    ten = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    assert firings.fire_due(skipping, ten) == 1  # outside quiet hours: it runs
    clock.now = datetime(2026, 12, 5, 22, 0, 1, tzinfo=UTC)  # 23:00 in Berlin: quiet
    ten_pm = datetime(2026, 12, 5, 22, 0, tzinfo=UTC)
    with database.write() as session:  # the hours between, accounted as run
        session.execute(
            update(Routine)
            .where(Routine.id.in_([skipping, running]))
            .values(accounted_until=ten_pm - timedelta(hours=1))
        )
    assert firings.fire_due(skipping, ten_pm) == 0
    assert firings.fire_due(running, ten_pm) == 1
    assert len(_messages(database, skipping)) == 1  # no message, so no turn, no model call
    assert _outcomes(database, skipping)[-1] == (
        "22:00",
        "skipped",
        "quiet hours: until 10:30 Europe/Berlin",
        0,
    )
    assert _outcomes(database, running)[-1] == ("22:00", "ran", "", 0)
    # After the quiet hours it runs again.
    clock.now = datetime(2026, 12, 6, 10, 0, 1, tzinfo=UTC)  # 11:00 in Berlin
    with database.write() as session:
        session.execute(
            update(Routine)
            .where(Routine.id == skipping)
            .values(accounted_until=datetime(2026, 12, 6, 9, 0, tzinfo=UTC))
        )
    assert firings.fire_due(skipping, datetime(2026, 12, 6, 10, 0, tzinfo=UTC)) == 1


def test_an_unknown_quiet_hours_choice_is_refused_with_the_choices(database: Database) -> None:
    with pytest.raises(Invalid, match="quiet_hours must be one of run, skip"):
        _routine(database, quiet_hours="sometimes")
