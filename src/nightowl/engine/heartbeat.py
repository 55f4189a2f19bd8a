"""Worker heartbeats and the takeover of a dead worker's unfinished turns."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from nightowl.config import Settings
from nightowl.engine.durable import DurableEngine
from nightowl.metrics import Metrics
from nightowl.store.database import Database
from nightowl.store.tables import utcnow
from nightowl.store.turns import has_waiting_turns
from nightowl.store.workers import beat, claim_dead, stale_workers

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats for this worker; recovers workers whose beat stopped (DBOS recovers only its own)."""

    def __init__(
        self, settings: Settings, database: Database, engine: DurableEngine, metrics: Metrics
    ) -> None:
        self._settings = settings
        self._database = database
        self._engine = engine
        self._metrics = metrics
        self._me = settings.worker_id

    def beat_once(self) -> None:
        """Write this worker's heartbeat."""
        with self._database.write() as session:
            beat(session, self._me)

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

    def pace_queue(self) -> None:
        """Let the engine slow its queue polling when no turn waits to be dispatched."""
        with self._database.read() as session:
            waiting = has_waiting_turns(session)
        self._engine.relax_when_idle(waiting)

    async def run(self) -> None:
        """Beat and watch until cancelled."""
        while True:
            try:
                await asyncio.to_thread(self.beat_once)
                await asyncio.to_thread(self.take_over_dead)
                await asyncio.to_thread(self.pace_queue)
            except Exception:
                self._metrics.errors.labels(where="heartbeat").inc()
                log.exception("heartbeat failed; retrying")
            await asyncio.sleep(self._settings.heartbeat_interval_s)
