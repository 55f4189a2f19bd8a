"""Worker heartbeats and the takeover of a dead worker's unfinished turns."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from nightowl.config import Settings
from nightowl.engine.durable import STRANDED_GRACE_S, DurableEngine
from nightowl.metrics import Metrics
from nightowl.store.database import Database
from nightowl.store.tables import utcnow
from nightowl.store.turns import has_waiting_turns
from nightowl.store.workers import beat, claim_dead, dead_with_pending, stale_workers

log = logging.getLogger(__name__)


def stop_this_process() -> None:
    """Stop the server as SIGTERM does (its runs stay pending in the store for their owner)."""
    os.kill(os.getpid(), signal.SIGTERM)


class Heartbeat:
    """Beats for this worker; recovers workers whose beat stopped (DBOS recovers only its own)."""

    def __init__(
        self,
        settings: Settings,
        database: Database,
        engine: DurableEngine,
        metrics: Metrics,
        fence: Callable[[], None] = stop_this_process,
    ) -> None:
        self._settings = settings
        self._database = database
        self._engine = engine
        self._metrics = metrics
        self._me = settings.worker_id
        self._beaten = False
        self._fence = fence

    def beat_once(self) -> str | None:
        """Write this worker's heartbeat; the executor id of the worker that took this one
        over while it was alive, if one did (then nothing is written)."""
        with self._database.write() as session:
            taken_by = beat(session, self._me, first=not self._beaten)
        self._beaten = True
        return taken_by

    def take_over_dead(self) -> list[str]:
        """Recover the pending workflows of every worker whose heartbeat timed out."""
        cutoff = utcnow() - timedelta(seconds=self._settings.heartbeat_timeout_s)
        with self._database.read() as session:
            candidates = stale_workers(session, cutoff, self._me)
        taken = []
        for executor_id in candidates:
            with self._database.write() as session:
                won = claim_dead(session, executor_id, cutoff, self._me)
            if not won:
                continue
            recovered = self._engine.recover(executor_id)
            self._metrics.workers_recovered.inc()
            log.warning(
                "took over a dead worker",
                extra={"dead_executor_id": executor_id, "workflows": recovered},
            )
            taken.append(executor_id)
        return taken

    def recover_from_the_dead(self) -> list[str]:
        """Recover what workers already declared dead still own (one taken over while alive
        dequeued more before it stopped itself); idempotent, as DBOS's recovery is."""
        with self._database.read() as session:
            owners = dead_with_pending(session)
        for executor_id in owners:
            recovered = self._engine.recover(executor_id)
            log.warning(
                "recovered what a dead worker still owned",
                extra={"dead_executor_id": executor_id, "workflows": recovered},
            )
        return owners

    def pace_queue(self) -> None:
        """Let the engine slow its queue polling when no turn waits to be dispatched."""
        with self._database.read() as session:
            waiting = has_waiting_turns(session)
        self._engine.relax_when_idle(waiting)

    async def run(self, takes_over: bool = True) -> None:
        """Beat and watch until cancelled (an API process, `takes_over` False, only beats:
        it runs no turns to take over and polls no queue to pace).

        The beat has a thread of its own: on the event loop's shared thread pool it waited
        behind the turns' store work, and a busy worker (two workers on two cores, a backlog
        of turns) missed its timeout, was taken over while alive, and both ran the same turns
        (a step recorded twice failed them)."""
        stop = threading.Event()
        beater = threading.Thread(
            target=self._beat_until, args=(stop,), name="heartbeat", daemon=True
        )
        beater.start()
        last_look = time.monotonic()
        try:
            while True:
                if takes_over:
                    try:
                        await asyncio.to_thread(self.take_over_dead)
                        await asyncio.to_thread(self.pace_queue)
                        if time.monotonic() - last_look >= STRANDED_GRACE_S / 2:
                            last_look = time.monotonic()
                            await asyncio.to_thread(self._engine.restart_stranded)
                            await asyncio.to_thread(self.recover_from_the_dead)
                    except Exception:
                        self._metrics.errors.labels(where="heartbeat").inc()
                        log.exception("taking over dead workers failed; retrying")
                await asyncio.sleep(self._settings.heartbeat_interval_s)
        finally:
            stop.set()

    def _beat_until(self, stop: threading.Event) -> None:
        """Beat every interval until `stop` is set (the heartbeat's own thread)."""
        while not stop.is_set():
            try:
                taken_by = self.beat_once()
            except Exception:
                self._metrics.errors.labels(where="heartbeat").inc()
                log.exception("heartbeat failed; retrying")
            else:
                if taken_by is not None:
                    self._metrics.workers_fenced.inc()
                    log.critical(
                        "this worker was declared dead while it was alive (its heartbeats"
                        " came later than NIGHTOWL_HEARTBEAT_TIMEOUT_S) and its runs were"
                        " taken over; it stops so they run only there (restart it: it"
                        " rejoins as a new worker)",
                        extra={"taken_over_by": taken_by},
                    )
                    self._fence()
                    return
            stop.wait(self._settings.heartbeat_interval_s)
