"""The memory pass after each turn (see memory/memory_pass.py): a workflow of its own, started
by the turn once it has finished, so the owner's next message neither waits for it nor cuts it
off (a preempted turn would lose it)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS, SetWorkflowID

from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.memory.memory_pass import MEMORY_STEP, run_memory_pass
from nightowl.models.base import Model, is_transient
from nightowl.store.database import Database
from nightowl.store.outages import waits_out_outages

log = logging.getLogger(__name__)

StartMemoryPass = Callable[[str, str, str, bool], Awaitable[None]]


def is_local(model: Model) -> bool:
    """Whether the model is the embedded local one (a pass would cost long CPU time)."""
    return model.name.startswith("local")


def build_memory_pass(database: Database, model: Model, calls: ModelCalls) -> StartMemoryPass:
    """Register the memory-pass workflow and its step (it writes once per turn, however often
    it runs); returns what a turn calls to start it."""

    @DBOS.step(
        name="nightowl.memory_pass",
        retries_allowed=True,
        max_attempts=3,
        interval_seconds=1.0,
        backoff_rate=2.0,
        should_retry=is_transient,
    )
    @waits_out_outages  # it writes once per turn, however often it runs
    async def memory_pass(
        turn_id: str, conversation_id: str, owner_id: str, use_model: bool
    ) -> dict[str, Any]:
        calls.metrics.steps.labels(kind="memory_pass").inc()
        place = CallPlace(conversation_id, turn_id, MEMORY_STEP)
        complete = calls.caller(model, place)
        return await run_memory_pass(
            database, model.name, complete, turn_id, conversation_id, owner_id, use_model
        )

    @DBOS.workflow(name="nightowl.remember")
    async def remember(
        turn_id: str, conversation_id: str, owner_id: str, use_model: bool
    ) -> dict[str, Any]:
        try:
            return await memory_pass(turn_id, conversation_id, owner_id, use_model)
        except Exception as error:  # memory is best effort: the turn itself is done
            calls.metrics.errors.labels(where="memory_pass").inc()
            log.warning("memory pass failed", extra={"error": repr(error)[:300]})
            return {"failed": True}

    async def start(turn_id: str, conversation_id: str, owner_id: str, use_model: bool) -> None:
        """Start the pass of a finished turn (once: its workflow id derives from the turn)."""
        with SetWorkflowID(f"memory-{turn_id}"):
            await DBOS.start_workflow_async(remember, turn_id, conversation_id, owner_id, use_model)

    return start
