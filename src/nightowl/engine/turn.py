"""The turn workflow: take the conversation's batch, run the agent, record how it ended.

Each side effect is a named DBOS step, so a crash resumes at the first unfinished one.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dbos import DBOS

from nightowl.engine.durable import TurnWorkflow
from nightowl.logs import log_context
from nightowl.metrics import Metrics
from nightowl.store.database import Database
from nightowl.store.turns import claim_batch, finish_turn, get_turn

log = logging.getLogger(__name__)


def build_turn_workflow(database: Database, metrics: Metrics) -> TurnWorkflow:
    """Register the turn workflow and its steps with DBOS and return the workflow."""

    @DBOS.step(name="nightowl.take_batch")
    async def take_batch(turn_id: str) -> list[int]:
        def claim() -> list[int]:
            with database.write() as session:
                return [message.seq for message in claim_batch(session, turn_id)]

        metrics.steps.labels(kind="take_batch").inc()
        return await asyncio.to_thread(claim)

    @DBOS.step(name="nightowl.finish_turn")
    async def record_finish(turn_id: str, status: str, error: str | None) -> None:
        def finish() -> None:
            with database.write() as session:
                finish_turn(session, turn_id, status=status, error=error)

        metrics.steps.labels(kind="finish_turn").inc()
        await asyncio.to_thread(finish)

    @DBOS.workflow(name="nightowl.turn")
    async def turn(turn_id: str) -> str:
        conversation_id = await asyncio.to_thread(_conversation_of, database, turn_id)
        with log_context(conversation_id=conversation_id, turn_id=turn_id):
            started = time.perf_counter()
            metrics.turns_started.inc()
            batch = await take_batch(turn_id)
            log.info("turn took its batch", extra={"batch_seqs": batch})
            await record_finish(turn_id, "done", None)
            metrics.turns_finished.labels(outcome="done").inc()
            metrics.turn_seconds.observe(time.perf_counter() - started)
            log.info("turn finished")
            return "done"

    return turn


def _conversation_of(database: Database, turn_id: str) -> str:
    with database.read() as session:
        return get_turn(session, turn_id).conversation_id
