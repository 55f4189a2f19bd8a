"""An owner's message is dispatched the moment its turn is enqueued, not at the queue's next
poll: with polling slowed to once every 5 seconds, each turn still reaches the model within a
second; and the nudgeable event that makes it so keeps DBOS's stop semantics."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nightowl.config import Settings
from nightowl.engine.durable import DurableEngine
from nightowl.engine.queue_nudge import NudgeableEvent
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script


def _at(value: Any) -> float:
    return (datetime.fromisoformat(value) if isinstance(value, str) else value).timestamp()


@pytest.mark.slow
def test_a_turn_starts_at_once_however_slowly_the_queue_polls(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(tmp_path / "s.json", [say("ok", final=True)])
    slow = {
        "NIGHTOWL_QUEUE_POLLING_INTERVAL_S": "5",
        "NIGHTOWL_QUEUE_IDLE_POLLING_INTERVAL_S": "5",
    }
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=slow).start()
    waits = []
    try:
        with server.client() as client:
            for n in range(3):
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                sent = client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": f"m{n}", "text": "hi"},
                ).json()
                started = wait_for(
                    lambda c=conversation: rows(
                        database_url,
                        "SELECT MIN(started_at) FROM model_calls WHERE conversation_id = :c",
                        c=c,
                    )[0][0],
                    timeout=20,
                )
                waits.append(_at(started) - _at(sent["created_at"]))
                time.sleep(0.5)
    finally:
        server.stop()
    # Polling alone would make each wait about 2.5 s on average, up to 5 s.
    assert max(waits) < 1.5, waits


def test_a_nudge_wakes_every_waiter_once_and_a_set_still_stops_them() -> None:
    event = threading.Event()
    event.__class__ = NudgeableEvent  # as DBOS made it, re-classed
    assert isinstance(event, NudgeableEvent)
    woke: list[tuple[bool, float]] = []

    def waiter() -> None:
        started = time.monotonic()
        woke.append((event.wait(timeout=10), time.monotonic() - started))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    event.nudge()
    for thread in threads:
        thread.join(timeout=5)
    assert len(woke) == 3 and all(not stopped and took < 5 for stopped, took in woke)
    # A nudge that came while this thread was busy ends its next wait at once, only once.
    event.nudge()
    started = time.monotonic()
    assert event.wait(timeout=10) is False and time.monotonic() - started < 1
    assert event.wait(timeout=0.2) is False  # no nudge left: it waited out the timeout
    event.set()
    assert event.wait(timeout=10) is True and event.is_set()


def test_a_nudge_for_one_queue_wakes_only_that_queues_worker_thread() -> None:
    """An enqueue on one queue polls that queue alone: the others (and DBOS's queue manager)
    sleep on, each poll of theirs would cost a transaction or two for nothing."""
    event = threading.Event()
    event.__class__ = NudgeableEvent
    assert isinstance(event, NudgeableEvent)
    woke: dict[str, float] = {}

    def waiter(name: str) -> None:
        started = time.monotonic()
        event.wait(timeout=1.5)
        woke[name] = time.monotonic() - started

    names = ["queue-worker-turns", "queue-worker-timers", "queue-manager"]
    threads = [threading.Thread(target=waiter, args=(n,), name=n) for n in names]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    event.nudge("turns")
    for thread in threads:
        thread.join(timeout=5)
    assert woke["queue-worker-turns"] < 1.0, woke
    assert woke["queue-worker-timers"] >= 1.4 and woke["queue-manager"] >= 1.4, woke


class _PacedQueue:
    """What the engine asks of DBOS's queue when it changes pace."""

    def __init__(self) -> None:
        self.intervals: list[float] = []

    def set_polling_interval_sec(self, interval: float) -> None:
        self.intervals.append(interval)


def test_the_queue_polls_fast_only_while_a_turn_waits_to_be_dispatched() -> None:
    """A running turn needs no poll (an urgent one started on enqueue): the queue polls at the
    idle rate unless some turn is queued (behind its conversation's running turn, or delayed),
    then at the active rate until it starts."""
    settings = Settings(queue_polling_interval_s=0.05, queue_idle_polling_interval_s=1.0)
    engine = DurableEngine(settings)
    queue = _PacedQueue()
    engine._queue, engine._fast = queue, True  # as launched: fast
    engine.relax_when_idle(waiting=True)  # a turn waits: stays fast
    engine.relax_when_idle(waiting=False)  # none waits (one may run): idle pace at once
    engine.relax_when_idle(waiting=False)
    engine.relax_when_idle(waiting=True)  # one queued behind a running turn: fast again
    assert queue.intervals == [1.0, 0.05]
    # With an active window, an enqueue keeps the fast pace for the window.
    windowed = DurableEngine(Settings(queue_active_window_s=60))
    windowed._queue, windowed._fast = _PacedQueue(), True
    windowed._last_activity = time.monotonic()
    windowed.relax_when_idle(waiting=False)
    assert windowed._fast and windowed._queue.intervals == []


@pytest.mark.slow
def test_an_api_process_runs_no_queue_thread_and_no_schedule_poller(tmp_path: Path) -> None:
    """`--role api` answers requests with no DBOS thread polling the database beside them:
    neither the queue's nor the schedules' (a worker runs both)."""

    def polling_threads() -> set[str]:
        names = {t.name for t in threading.enumerate() if t.is_alive()}
        return {
            kind
            for kind in ("queue_thread", "dynamic_scheduler_loop")
            if any(f"({kind})" in name for name in names)
        }

    with fresh_database("postgresql", tmp_path) as url:
        seen = {}
        for role in ("worker", "api"):
            settings = Settings(role=role, database_url=url, data_dir=tmp_path / role)
            engine = DurableEngine(settings)
            engine.launch()
            try:
                if role == "worker":
                    seen[role] = wait_for(lambda: polling_threads() or None, timeout=10)
                else:  # the patched entry points return at once: their threads end
                    wait_for(lambda: not polling_threads(), timeout=10)
                    seen[role] = polling_threads()
            finally:
                engine.shutdown()
            wait_for(lambda: not polling_threads(), timeout=30)
    assert seen == {"worker": {"queue_thread", "dynamic_scheduler_loop"}, "api": set()}
