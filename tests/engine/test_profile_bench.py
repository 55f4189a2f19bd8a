"""The turn profiler's accounting (bench/profile_turn.py): a py-spy sample is charged to the
outermost anchor (a background thread's root) or else the innermost part that claims it, and
the tables split the measured CPU per turn in the samples' proportions."""

from __future__ import annotations

from bench.profile_turn import _frames, charge, library_of, part_of

SITE = "/venv/lib/python3.11/site-packages"
OUTBOX = (
    f"Thread._bootstrap (threading.py:1);run_turn (/src/nightowl/engine/turn.py:170);"
    f"tool (/src/nightowl/tools/messaging.py:200);"
    f"deliver_to_user (/src/nightowl/store/outbox.py:30);"
    f"append_message (/src/nightowl/store/conversations.py:340);"
    f"Session.execute ({SITE}/sqlalchemy/orm/session.py:2300)"
)
POLL = (
    f"Thread._bootstrap (threading.py:1);queue_thread ({SITE}/dbos/_queue.py:700);"
    f"SystemDatabase.start_queued_workflows ({SITE}/dbos/_sys_db.py:4900);"
    f"Connection.execute ({SITE}/sqlalchemy/engine/base.py:1400)"
)
STEP = (
    f"take_batch ({SITE}/dbos/_core.py:1);"
    f"build_turn_workflow.<locals>.take_batch.<locals>.claim (/src/nightowl/engine/turn.py:82);"
    f"claim_batch (/src/nightowl/store/turns.py:120);"
    f"Cursor.execute ({SITE}/psycopg/cursor.py:90)"
)
IDLE = "Thread._bootstrap (threading.py:1);BaseEventLoop._run_once (asyncio/base_events.py:1)"


def test_a_sample_goes_to_the_innermost_part_or_the_outermost_anchor() -> None:
    assert part_of(_frames(OUTBOX)) == "turn: the outbox"  # not the store module it calls
    assert part_of(_frames(POLL)) == "DBOS: queue polling"  # though _sys_db.py is inside
    assert part_of(_frames(STEP)) == "turn: take the batch"  # the step's inner closure
    assert part_of(_frames(IDLE)) == "other"
    assert library_of(_frames(OUTBOX)) == "sqlalchemy"
    assert library_of(_frames(STEP)) == "psycopg (PostgreSQL driver)"


def test_the_tables_split_the_turns_cpu_in_the_samples_proportions() -> None:
    tables = charge({OUTBOX: 3, POLL: 1}, cpu_ms_per_turn=40.0)
    assert tables["by_part"] == {"turn: the outbox": 30.0, "DBOS: queue polling": 10.0}
    assert tables["by_library"] == {"sqlalchemy": 40.0}
