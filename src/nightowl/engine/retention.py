"""Retention: delete finished workflow records, and the step results kept beside them, older
than the retention period."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from nightowl.config import Settings
from nightowl.engine.durable import DurableEngine
from nightowl.metrics import Metrics
from nightowl.store.database import Database
from nightowl.store.step_results import forget_results_before
from nightowl.store.tables import utcnow

log = logging.getLogger(__name__)


class RetentionSweep:
    """A periodic job that keeps durable history bounded (app records are kept)."""

    def __init__(
        self,
        settings: Settings,
        engine: DurableEngine,
        metrics: Metrics,
        database: Database | None = None,
    ) -> None:
        self._database = database
        self._settings = settings
        self._engine = engine
        self._metrics = metrics

    def sweep_once(self) -> int:
        """Delete what is past retention now; returns how many workflow records went."""
        cutoff = utcnow() - timedelta(days=self._settings.retention_days)
        deleted = self._engine.delete_finished_before(cutoff.isoformat())
        if self._database is not None:
            with self._database.write() as session:
                forget_results_before(session, cutoff)
        if deleted:
            self._metrics.workflows_deleted.inc(deleted)
            log.info("retention deleted finished workflows", extra={"count": deleted})
        return deleted

    async def run(self) -> None:
        """Sweep now and then every `retention_sweep_interval_s`, until cancelled."""
        while True:
            try:
                await asyncio.to_thread(self.sweep_once)
            except Exception:
                self._metrics.errors.labels(where="retention").inc()
                log.exception("retention sweep failed; will retry")
            await asyncio.sleep(self._settings.retention_sweep_interval_s)
