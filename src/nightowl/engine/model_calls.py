"""The model-call sequence, written once: record the call, call the model, record its failure
or its usage, cost, request sections, cache break and prefix-cache meter (`ModelCalls`). Every
model call goes through it: turns and helpers, compaction, cache warming, the memory pass and
the safety reviewer. Beside it, what the agent loop's model step reads and writes around the
call (the pinned prompt, budgets and guard, the reply in the transcript)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from datetime import time as day_start
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from nightowl.harness.guard import GuardLimits, budget_stop, check_guard
from nightowl.harness.loop import ModelStep, Stop
from nightowl.harness.pins import pin_now
from nightowl.harness.prompt import PROMPT_STYLES, SYSTEM_PROMPT, PromptStyle
from nightowl.harness.sections import (
    CacheBreak,
    find_cache_break,
    prompt_tokens,
    request_sections,
    shared_prefix_tokens,
)
from nightowl.memory.context import memory_note, profile_for_pin
from nightowl.memory.render import seen_outside
from nightowl.messages import Entry, ModelReply, ModelRequest, PromptPin, ToolCall, ToolSpec
from nightowl.metrics import Metrics
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.store.compactions import latest_compaction
from nightowl.store.database import Database
from nightowl.store.step_results import record_result
from nightowl.store.tables import utcnow
from nightowl.store.transcript import (
    finish_model_call,
    load_transcript,
    previous_sections,
    prompt_pin,
    put_entry,
    start_model_call,
)
from nightowl.store.turns import note_progress, set_activity
from nightowl.store.usage import spending_today
from nightowl.tracing.spans import Traces

log = logging.getLogger(__name__)


class Unknown:
    """Not known to the caller: look it up."""


UNKNOWN = Unknown()
# The sections and time of a conversation's previous request, None when there is none.
Previous = tuple[list[list[Any]], datetime] | None | Unknown


@dataclass(frozen=True)
class CallStart:
    """Where a model call starts from, or why it must not happen."""

    stop: str | None  # a sentence for the owner when the turn must stop
    once: str | None  # the key that makes a budget stop speak once a day
    history: list[Entry]
    record: str  # the model_calls row of this call ("" when stopped)
    pin: PromptPin
    memory: str = ""  # memory's part of the newest note (see memory/context.py)
    # The reply entry's meta: outside text memory showed this call (see `seen_outside`).
    seen: dict[str, Any] = field(default_factory=dict)


def model_step_key(turn_id: str, step: int) -> str:
    """The key of a turn's model-call step, in the transcript and the step results."""
    return f"{turn_id}:model:{step}"


def conversation_pin(
    session: Session,
    conversation_id: str,
    summaries: list[tuple[str, str]],
    specs: dict[str, ToolSpec],
    groups: list[tuple[str, str]],
    instructions: str = SYSTEM_PROMPT,
    made: list[PromptPin] | None = None,
) -> PromptPin:
    """The conversation's pinned prompt, pinned now (the server's instructions, tools and the
    owner's current profile) if it has none: at its first call, or after a compaction.
    `made`: a pin made now is appended to it (its profile is the current one)."""

    def pin() -> PromptPin:
        made_now = pin_now(
            instructions,
            summaries,
            specs,
            groups=groups,
            profile=profile_for_pin(session, conversation_id),
        )
        if made is not None:
            made.append(made_now)
        return made_now

    return prompt_pin(session, conversation_id, pin)


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
    instructions: str = SYSTEM_PROMPT,
    memory: str | None = None,
    pin: PromptPin | None = None,
    style: PromptStyle = PROMPT_STYLES["full"],
) -> CallStart:
    """Pin the prompt (once per conversation), check budgets and the guard, load the history
    and record the call as started (the caller looked for an earlier attempt's result of the
    step first, `recorded_result`, in the same transaction).
    `memory`: the newest note's memory part as this run's first call found it (a run reads
    memory once: looking it up costs a dozen queries, and it changes little within a run);
    `style`: how much of the work log the model is shown (harness/prompt.py)."""
    made: list[PromptPin] = []
    if pin is None:  # else the run's, as its first call found it (only compaction changes it)
        pin = conversation_pin(
            session, conversation_id, summaries, specs, groups, instructions, made
        )
    midnight = datetime.combine(utcnow().date(), day_start.min, tzinfo=utcnow().tzinfo)
    over = budget_stop(limits, spending_today(session, turn_id, midnight))
    stop = over or check_guard(limits, step, [ToolCall.from_dict(c) for c in calls_so_far])
    history = load_transcript(session, conversation_id)
    record, found = "", ""
    if not stop:
        record = start_model_call(session, conversation_id, turn_id, step, model_name)
        set_activity(session, turn_id, "thinking")
        found = (
            memory
            if memory is not None
            else memory_note(
                session,
                conversation_id,
                pin.profile,
                history,
                style.log_entries,
                style.recent_log_entries,
                # Pinned in this transaction: the profile it took is the current one.
                current=made[0].profile if made else None,
            )
        )
    # A budget speaks once a day, however many turns it stops.
    once = f"budget:{midnight.date().isoformat()}" if over else None
    if stop:  # kept, so a re-run of the step stops the same way whatever changed since
        result = ModelStep(stop=Stop(stop, once))
        record_result(session, model_step_key(turn_id, step), result.to_dict())
    seen = seen_outside(history, pin.profile, found) if not stop else {}
    return CallStart(stop, once, history, record, pin, found, seen)


def keep_reply(
    session: Session,
    reply: ModelReply,
    *,
    run_id: str,
    conversation_id: str,
    step: int,
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    note: Entry | None = None,
) -> None:
    """Store the reply in the transcript (with `meta`: what outside text memory showed the
    call, `CallStart.seen`) and the step's result; call it in the transaction that records
    the call (`ModelCalls.call(then=...)`), so a re-run step finds both or neither.
    `progress`: note that the run made progress (once per run in a process is enough: only a
    start of its workflow counts a start again); `note`: the newest note the call was
    shown, kept before the reply where the request had it (harness/notes.py)."""
    entry = Entry(kind="assistant", text=reply.text, tool_calls=reply.tool_calls, meta=meta or {})
    key = model_step_key(run_id, step)
    if note is not None:
        put_entry(session, conversation_id, run_id, f"{key}:note", note)
    put_entry(session, conversation_id, run_id, key, entry)
    record_result(session, key, ModelStep(reply=reply).to_dict())
    if progress:
        note_progress(session, run_id)


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
    previous: Previous = UNKNOWN,
) -> CacheBreak | None:
    """Store a call's usage and cost, its request's sections, where it broke the cached
    prefix (if it did) and the prefix-cache meter, in one statement; the break. `previous`:
    the sections and time of the conversation's request before this one, when the caller
    knows them (a run keeps its own), else they are looked up."""
    found = (
        previous_sections(session, conversation_id, record)
        if isinstance(previous, Unknown)
        else previous
    )
    broke = find_cache_break(found[0], sections) if found else None
    if broke is not None and found is not None:
        compaction = latest_compaction(session, conversation_id)
        if compaction is not None and compaction.created_at >= found[1]:
            # A compaction rewrites the prefix on purpose (summary, re-pinned prompt).
            broke = CacheBreak(broke.section, "the conversation was compacted", True)
    # The meter counts a prefix as cached only within the provider's cache lifetime.
    warm = found is not None and (utcnow() - found[1]).total_seconds() <= cache_lifetime_s
    shared = shared_prefix_tokens(found[0], sections) if found is not None and warm else 0
    cost = prices.cost(model_name, reply.usage)
    finish_model_call(
        session,
        record,
        reply.usage.to_dict(),
        cost_usd=cost,
        sections=sections,
        cache_break=f"{broke.section}: {broke.reason}" if broke else None,
        cache_break_explained=broke.explained if broke else None,
        meter_prompt_tokens=prompt_tokens(sections),
        meter_prefix_tokens=shared,
    )
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


@dataclass(frozen=True)
class CallPlace:
    """Where a model call is recorded: its conversation, the run it belongs to (a turn, a
    helper's run, "compaction:<turn>", "warm") and its step (a review is -1, a memory pass
    -2); `record`: the call's row when the caller made it already (in a transaction of its
    own, with what it read), else it is made when the call ends."""

    conversation_id: str
    run_id: str
    step: int
    record: str = ""


T = TypeVar("T")


class ModelCalls:
    """Calls a model and records the call: started, failed, or finished with its usage, cost
    and (for requests of a conversation) their sections and the cache break."""

    def __init__(
        self,
        database: Database,
        metrics: Metrics,
        prices: PriceTable,
        cache_lifetime_s: float,
        traces: Traces | None = None,
    ) -> None:
        self.database, self.metrics = database, metrics
        self.prices, self.cache_lifetime_s = prices, cache_lifetime_s
        self.traces = traces or Traces()  # a span per call
        # The last request's sections and time of each run the agent loop runs in this
        # process (`follow`): its next call need not look them up.
        self._last_sent: dict[str, Previous] = {}

    async def call(
        self,
        model: Model,
        request: ModelRequest,
        place: CallPlace,
        *,
        sections: bool = True,
        then: Callable[[Session, ModelReply], T] | None = None,
        previous: Previous = UNKNOWN,
    ) -> tuple[ModelReply, T | None]:
        """The model's reply to `request`, recorded; `then` runs in the transaction that
        records it (what the caller must commit with the reply, e.g. the transcript entry
        and the step's result), and its value is returned beside the reply."""
        started = utcnow()
        with self.traces.model_call(
            model.name,
            request.purpose,
            place.conversation_id,
            place.run_id,
            place.step,
            request.messages,
        ) as span:
            try:
                reply = await model.complete(request)
            except Exception as error:
                if place.record:
                    await asyncio.to_thread(
                        fail_model_call, self.database, place.record, repr(error)
                    )
                raise
            cost = lambda: self.prices.cost(model.name, reply.usage)  # noqa: E731
            self.traces.model_replied(span, reply, cost)
        shapes = [list(s) for s in request_sections(request)] if sections else None

        def save() -> tuple[CacheBreak | None, T | None]:
            # A model call is done again if its record is lost (Database.write).
            with self.database.write(redoable=True) as session:
                record = place.record or start_model_call(
                    session, place.conversation_id, place.run_id, place.step, model.name, started
                )
                broke = None
                if shapes is not None:
                    broke = record_outcome(
                        session,
                        conversation_id=place.conversation_id,
                        record=record,
                        model_name=model.name,
                        reply=reply,
                        sections=shapes,
                        prices=self.prices,
                        cache_lifetime_s=self.cache_lifetime_s,
                        previous=previous,
                    )
                else:
                    cost = self.prices.cost(model.name, reply.usage)
                    finish_model_call(session, record, reply.usage.to_dict(), cost_usd=cost)
                return broke, then(session, reply) if then is not None else None

        broke, extra = await asyncio.to_thread(save)
        report_cache_break(self.metrics, broke)
        if shapes is not None and place.run_id in self._last_sent:
            self._last_sent[place.run_id] = (shapes, started)
        return reply, extra

    def follow(self, run_id: str) -> None:
        """Keep the last request's sections of the run `run_id` from now on (`previous`)."""
        self._last_sent.setdefault(run_id, UNKNOWN)

    def previous(self, run_id: str) -> Previous:
        """The last request's sections and time of a followed run (UNKNOWN: none here yet)."""
        return self._last_sent.get(run_id, UNKNOWN)

    def forget(self, run_id: str) -> None:
        """Stop following the run (it ended in this process)."""
        self._last_sent.pop(run_id, None)

    def caller(
        self, model: Model, place: CallPlace
    ) -> Callable[[ModelRequest], Awaitable[ModelReply]]:
        """`model.complete` for code outside the engine (the memory pass, the reviewer), each
        call recorded at `place` (without sections: its requests are not the conversation's)."""

        async def complete(request: ModelRequest) -> ModelReply:
            reply, _ = await self.call(model, request, place, sections=False)
            return reply

        return complete
