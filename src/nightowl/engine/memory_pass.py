"""The memory pass as a durable step after each turn (see memory/memory_pass.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS

from nightowl.memory.memory_pass import run_memory_pass
from nightowl.metrics import Metrics
from nightowl.models.base import Model, TransientModelError
from nightowl.store.database import Database

log = logging.getLogger(__name__)

MemoryStep = Callable[[str, str, str, bool], Awaitable[dict[str, Any]]]


def is_local(model: Model) -> bool:
    """Whether the model is the embedded local one (a pass would cost long CPU time)."""
    return model.name.startswith("local")


def _is_transient(error: BaseException) -> bool:
    return isinstance(error, TransientModelError)


def build_memory_step(database: Database, model: Model, metrics: Metrics) -> MemoryStep:
    """Register the memory-pass step; it writes once per turn, however often it runs."""

    @DBOS.step(
        name="nightowl.memory_pass",
        retries_allowed=True,
        max_attempts=3,
        interval_seconds=1.0,
        backoff_rate=2.0,
        should_retry=_is_transient,
    )
    async def memory_pass(
        turn_id: str, conversation_id: str, owner_id: str, use_model: bool
    ) -> dict[str, Any]:
        metrics.steps.labels(kind="memory_pass").inc()
        return await run_memory_pass(database, model, turn_id, conversation_id, owner_id, use_model)

    async def remember(
        turn_id: str, conversation_id: str, owner_id: str, use_model: bool
    ) -> dict[str, Any]:
        """Run the pass; a turn that did not finish normally gets only its log entry."""
        try:
            return await memory_pass(turn_id, conversation_id, owner_id, use_model)
        except Exception as error:  # memory is best effort: the turn itself is done
            metrics.errors.labels(where="memory_pass").inc()
            log.warning("memory pass failed", extra={"error": repr(error)[:300]})
            return {"failed": True}

    return remember
