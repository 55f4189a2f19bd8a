"""The compaction workflow: after a turn that ended with a large prompt and a quiet spell, one
durable step summarises the history (reusing the cached prefix) and replaces it.

A turn that ends big plans it (`plan_compaction`); the engine enqueues this workflow with the
idle window as its delay. When it runs, anything that happened since (a message, a turn) means
the conversation woke up: it is skipped, and the next turn to end big plans it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from sqlalchemy.orm import Session

from nightowl.engine.model_calls import CallPlace, ModelCalls, conversation_pin
from nightowl.harness.compaction import (
    compacted_entry,
    latest_user_facing,
    prompt_tokens_of,
    summary_request,
    wakes_within,
)
from nightowl.harness.prompt import instructions_for
from nightowl.messages import Entry, ModelReply, PromptPin, ToolSpec
from nightowl.models.base import Model
from nightowl.store.compactions import (
    is_quiet,
    last_entry_id,
    last_prompt_size,
    record_compaction,
)
from nightowl.store.database import Database
from nightowl.store.outages import waits_out_outages
from nightowl.store.step_results import record_result, recorded_result
from nightowl.store.tables import utcnow
from nightowl.store.transcript import (
    load_transcript,
    start_model_call,
)
from nightowl.store.wakes import upcoming_wakes

log = logging.getLogger(__name__)

CompactionWorkflow = Callable[[str, str], Coroutine[Any, Any, str]]


@dataclass(frozen=True)
class CompactionSettings:
    """When to compact and what survives it."""

    at_tokens: int = 100_000
    idle_s: float = 600.0
    keep_messages: int = 6


def plan_compaction(
    database: Database, settings: CompactionSettings, conversation_id: str, turn_id: str
) -> bool:
    """True when the turn ended with a prompt above the threshold and no timer or routine will
    wake the conversation within the idle window anyway."""
    with database.read() as session:
        return compaction_wanted(session, settings, conversation_id, turn_id)


def compaction_wanted(
    session: Session, settings: CompactionSettings, conversation_id: str, turn_id: str
) -> bool:
    """`plan_compaction` in the caller's transaction (the turn's end records it with its
    finish: one step, not two)."""
    size = last_prompt_size(session, turn_id)
    if size is None or prompt_tokens_of(*size) < settings.at_tokens:
        return False
    return not _wake_due(session, conversation_id, settings.idle_s)


def _wake_due(session: Session, conversation_id: str, idle_s: float) -> bool:
    """Whether a timer or a routine wakes the conversation within `idle_s` from now."""
    now = utcnow()
    return wakes_within(upcoming_wakes(session, conversation_id, now), now, idle_s)


@dataclass(frozen=True)
class _Prepared:
    pin: PromptPin
    history: list[Entry]
    through: int
    record: str
    tokens: int


def _step_key(after_turn: str) -> str:
    return f"compaction:{after_turn}"


def build_compaction_workflow(
    database: Database,
    model: Model,
    calls: ModelCalls,
    summaries: list[tuple[str, str]],
    specs: dict[str, ToolSpec],
    groups: list[tuple[str, str]],
    settings: CompactionSettings,
) -> CompactionWorkflow:
    """Register the compaction workflow and its step with DBOS and return the workflow."""
    metrics = calls.metrics

    def prepare(conversation_id: str, after_turn: str) -> _Prepared | str:
        with database.write() as session:
            earlier = recorded_result(session, _step_key(after_turn))
            if earlier is not None:  # committed before a crash: do not summarise twice
                return str(earlier.value)
            if not is_quiet(session, conversation_id, after_turn):
                return "woke"
            if _wake_due(session, conversation_id, settings.idle_s):
                return "wake due"
            size = last_prompt_size(session, after_turn)
            pin = conversation_pin(session, conversation_id, summaries, specs, groups)
            history = load_transcript(session, conversation_id)
            through = last_entry_id(session, conversation_id)
            record = start_model_call(
                session, conversation_id, f"compaction:{after_turn}", 0, model.name
            )
            return _Prepared(pin, history, through, record, prompt_tokens_of(*size) if size else 0)

    def replace_history(
        session: Session,
        conversation_id: str,
        after_turn: str,
        ready: _Prepared,
        reply: ModelReply,
    ) -> str:
        if not reply.text.strip():
            return "empty summary"
        # Something arrived while the summary was written: keep the history as it is.
        quiet = is_quiet(session, conversation_id, after_turn)
        if not quiet or last_entry_id(session, conversation_id) != ready.through:
            return "woke"
        kept = latest_user_facing(ready.history, settings.keep_messages)
        entry = compacted_entry(reply.text, kept, ready.history)
        record_compaction(
            session,
            conversation_id,
            through_entry_id=ready.through,
            entry=entry.to_dict(),
            model_call_id=ready.record,
            tokens_before=ready.tokens,
        )
        return "compacted"

    def save(
        session: Session, conversation_id: str, after_turn: str, ready: _Prepared, reply: ModelReply
    ) -> str:
        """In the transaction that records the call: replace the history, keep the result."""
        outcome = replace_history(session, conversation_id, after_turn, ready, reply)
        record_result(session, _step_key(after_turn), outcome)
        return outcome

    @DBOS.step(name="nightowl.compact")
    @waits_out_outages  # again whole while the database is away: the result is recorded
    async def compact(conversation_id: str, after_turn: str) -> str:
        ready = await asyncio.to_thread(prepare, conversation_id, after_turn)
        if isinstance(ready, str):
            return ready
        instructions = instructions_for(model)  # as the turns of this model pin them
        request = summary_request(ready.pin, instructions, summaries, specs, ready.history)
        place = CallPlace(conversation_id, f"compaction:{after_turn}", 0, ready.record)
        _, outcome = await calls.call(
            model,
            request,
            place,
            then=lambda session, reply: save(session, conversation_id, after_turn, ready, reply),
        )
        return str(outcome)

    @DBOS.workflow(name="nightowl.compaction")
    async def compaction(conversation_id: str, after_turn: str) -> str:
        try:
            outcome = await compact(conversation_id, after_turn)
        except Exception as error:  # the history stays as it is; the next big turn retries
            log.warning("compaction failed", extra={"error": repr(error)[:300]})
            outcome = "failed"
        metrics.compactions.labels(outcome=outcome).inc()
        log.info(
            "compaction",
            extra={
                "conversation_id": conversation_id,
                "after_turn": after_turn,
                "outcome": outcome,
            },
        )
        return outcome

    return compaction
