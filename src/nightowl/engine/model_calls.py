"""What the model-call step writes before and after the call: the pinned prompt, budgets and
guard, the call's record; then the reply, its cost, its request's sections, the cache break
and the prefix-cache meter. Plain functions on a session; the step runs them in a thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from datetime import time as day_start
from typing import Any

from sqlalchemy.orm import Session

from nightowl.harness.guard import GuardLimits, budget_stop, check_guard
from nightowl.harness.pins import PromptPin, pin_now
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.harness.sections import (
    CacheBreak,
    find_cache_break,
    prompt_tokens,
    shared_prefix_tokens,
)
from nightowl.harness.transcript import Entry, ToolCall
from nightowl.memory.context import memory_note, profile_for_pin
from nightowl.metrics import Metrics
from nightowl.models.base import ModelReply, ToolSpec
from nightowl.models.pricing import PriceTable
from nightowl.store.compactions import latest_compaction
from nightowl.store.database import Database
from nightowl.store.tables import utcnow
from nightowl.store.transcript import (
    finish_model_call,
    load_transcript,
    previous_sections,
    prompt_pin,
    put_entry,
    record_sections,
    start_model_call,
)
from nightowl.store.turns import set_activity
from nightowl.store.usage import spending_today

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallStart:
    """Where a model call starts from, or why it must not happen."""

    stop: str | None  # a sentence for the owner when the turn must stop
    once: str | None  # the key that makes a budget stop speak once a day
    history: list[Entry]
    record: str  # the model_calls row of this call ("" when stopped)
    pin: PromptPin
    memory: str = ""  # memory's part of the newest note (see memory/context.py)


def conversation_pin(
    session: Session,
    conversation_id: str,
    summaries: list[tuple[str, str]],
    specs: dict[str, ToolSpec],
    groups: list[tuple[str, str]],
) -> PromptPin:
    """The conversation's pinned prompt, pinned now (the server's instructions, tools and the
    owner's current profile) if it has none: at its first call, or after a compaction."""
    return prompt_pin(
        session,
        conversation_id,
        lambda: pin_now(
            SYSTEM_PROMPT,
            summaries,
            specs,
            groups=groups,
            profile=profile_for_pin(session, conversation_id),
        ),
    )


def begin_model_call(
    session: Session,
    *,
    limits: GuardLimits,
    turn_id: str,
    conversation_id: str,
    step: int,
    calls_so_far: list[dict[str, Any]],
    model_name: str,
    summaries: list[tuple[str, str]],
    specs: dict[str, ToolSpec],
    groups: list[tuple[str, str]],
) -> CallStart:
    """Pin the prompt (once per conversation), check budgets and the guard, load the history
    and record the call as started."""
    pin = conversation_pin(session, conversation_id, summaries, specs, groups)
    midnight = datetime.combine(utcnow().date(), day_start.min, tzinfo=utcnow().tzinfo)
    over = budget_stop(limits, spending_today(session, turn_id, midnight))
    stop = over or check_guard(limits, step, [ToolCall.from_dict(c) for c in calls_so_far])
    history = [Entry.from_dict(p) for p in load_transcript(session, conversation_id)]
    record, memory = "", ""
    if not stop:
        record = start_model_call(session, conversation_id, turn_id, step, model_name)
        set_activity(session, turn_id, "thinking")
        memory = memory_note(session, conversation_id, pin.profile, history)
    # A budget speaks once a day, however many turns it stops.
    once = f"budget:{midnight.date().isoformat()}" if over else None
    return CallStart(stop, once, history, record, pin, memory)


def finish_with_reply(
    session: Session,
    *,
    turn_id: str,
    conversation_id: str,
    step: int,
    record: str,
    model_name: str,
    reply: ModelReply,
    sections: list[list[Any]],
    prices: PriceTable,
    cache_lifetime_s: float,
) -> CacheBreak | None:
    """Store the reply in the transcript and the call's outcome (`record_outcome`)."""
    entry = Entry(kind="assistant", text=reply.text, tool_calls=reply.tool_calls)
    put_entry(session, conversation_id, turn_id, f"{turn_id}:model:{step}", entry.to_dict())
    return record_outcome(
        session,
        conversation_id=conversation_id,
        record=record,
        model_name=model_name,
        reply=reply,
        sections=sections,
        prices=prices,
        cache_lifetime_s=cache_lifetime_s,
    )


def record_outcome(
    session: Session,
    *,
    conversation_id: str,
    record: str,
    model_name: str,
    reply: ModelReply,
    sections: list[list[Any]],
    prices: PriceTable,
    cache_lifetime_s: float,
) -> CacheBreak | None:
    """Store a call's usage and cost, its request's sections, where it broke the cached
    prefix (if it did) and the prefix-cache meter; the break."""
    found = previous_sections(session, conversation_id, record)
    broke = find_cache_break(found[0], sections) if found else None
    if broke is not None and found is not None:
        compaction = latest_compaction(session, conversation_id)
        if compaction is not None and compaction.created_at >= found[1]:
            # A compaction rewrites the prefix on purpose (summary, re-pinned prompt).
            broke = CacheBreak(broke.section, "the conversation was compacted", True)
    # The meter counts a prefix as cached only within the provider's cache lifetime.
    warm = found is not None and (utcnow() - found[1]).total_seconds() <= cache_lifetime_s
    shared = shared_prefix_tokens(found[0], sections) if found is not None and warm else 0
    record_sections(
        session,
        record,
        sections,
        f"{broke.section}: {broke.reason}" if broke else None,
        broke.explained if broke else None,
        (prompt_tokens(sections), shared),
    )
    cost = prices.cost(model_name, reply.usage)
    finish_model_call(session, record, reply.usage.to_dict(), cost_usd=cost)
    return broke


def report_cache_break(metrics: Metrics, broke: CacheBreak | None) -> None:
    """Count a cache break; warn when nothing explains it (it costs the owner money)."""
    if broke is None:
        return
    metrics.cache_breaks.labels(explained=str(broke.explained).lower()).inc()
    if not broke.explained:
        log.warning(
            "cache break: the request did not repeat the previous one's prefix",
            extra={"section": broke.section, "reason": broke.reason},
        )


def fail_model_call(database: Database, record: str, error: str) -> None:
    """Record that the model call `record` failed with `error` (its own transaction)."""
    with database.write() as session:
        finish_model_call(session, record, {}, error)
