"""The turn workflow: take the batch, then one durable step per model call and per tool call.

The decisions (what to send, whether to stop) come from the pure `harness`; this module only
runs them as DBOS steps, so a crash resumes at the first unfinished step and a finished step
is never run again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from dbos import DBOS

from nightowl.engine.batches import take_turn_batch
from nightowl.engine.compaction import plan_compaction
from nightowl.engine.durable import TurnWorkflow
from nightowl.engine.memory_pass import build_memory_pass, is_local
from nightowl.engine.model_calls import (
    CallStart,
    begin_model_call,
    fail_model_call,
    finish_with_reply,
    report_cache_break,
)
from nightowl.engine.timers import timer_workflow_id
from nightowl.engine.tool_calls import run_tool_call
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.pins import pinned_request
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.harness.sections import (
    CacheBreak,
    request_sections,
)
from nightowl.harness.transcript import Entry, ToolCall
from nightowl.logs import log_context
from nightowl.models.base import ModelConfigError, ModelReply, is_transient
from nightowl.store.database import Database
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import take_answer
from nightowl.store.tables import utcnow
from nightowl.store.transcript import (
    put_entry,
)
from nightowl.store.turns import (
    finish_turn,
    get_turn,
    mark_preempted,
    running_turn_ids,
    set_activity,
)
from nightowl.tools.messaging import answer_for_agent

log = logging.getLogger(__name__)


def build_turn_workflow(deps: TurnDeps) -> TurnWorkflow:
    """Register the turn workflow and its steps with DBOS and return the workflow."""
    database, metrics, running = deps.database, deps.metrics, deps.running
    specs = deps.tools.specs()
    groups = deps.tools.groups()
    summaries = deps.tools.summaries()
    remember = (
        build_memory_pass(database, deps.model, metrics, deps.prices)
        if deps.model is not None
        else None
    )
    pass_uses_model = deps.memory_pass == "on" or (
        deps.memory_pass == "auto" and deps.model is not None and not is_local(deps.model)
    )

    @DBOS.step(name="nightowl.take_batch")
    async def take_batch(turn_id: str) -> dict[str, Any]:
        def still_stopping() -> bool:
            with database.read() as session:
                turn = get_turn(session, turn_id)
                marked_running = running_turn_ids(session, turn.conversation_id)
            return any(other != turn_id for other in marked_running)

        # A preempted turn's task marks itself stopped within milliseconds; wait for that so
        # two turns of a conversation never overlap (a turn of a dead worker: give up waiting).
        for _ in range(100):
            if not await asyncio.to_thread(still_stopping):
                break
            await asyncio.sleep(0.02)

        def claim() -> dict[str, Any]:
            with database.write() as session:
                return take_turn_batch(session, turn_id)

        metrics.steps.labels(kind="take_batch").inc()
        return await asyncio.to_thread(claim)

    @DBOS.step(
        name="nightowl.call_model",
        retries_allowed=True,
        max_attempts=5,
        interval_seconds=1.0,
        backoff_rate=2.0,
        should_retry=is_transient,
    )
    async def call_model(
        turn_id: str, conversation_id: str, step: int, calls_so_far: list[dict[str, Any]]
    ) -> dict[str, Any]:
        assert deps.model is not None
        model = deps.model
        metrics.steps.labels(kind="model").inc()

        def prepare() -> CallStart:
            with database.write() as session:
                return begin_model_call(
                    session,
                    limits=deps.limits,
                    turn_id=turn_id,
                    conversation_id=conversation_id,
                    step=step,
                    calls_so_far=calls_so_far,
                    model_name=model.name,
                    summaries=summaries,
                    specs=specs,
                    groups=groups,
                )

        start = await asyncio.to_thread(prepare)
        if start.stop:
            return {"stop": start.stop, "once": start.once}
        now = utcnow().strftime("%Y-%m-%d %H:%M UTC")
        # The conversation keeps its pinned prompt (a cached prefix); what the server changed
        # since reaches it as notes in the newest message.
        newest = "\n\n".join(filter(None, [f"Current time: {now}.", start.memory]))
        request = pinned_request(
            start.pin, SYSTEM_PROMPT, summaries, specs, start.history, newest, groups
        )
        try:
            reply = await model.complete(request)
        except Exception as error:
            await asyncio.to_thread(fail_model_call, database, start.record, repr(error))
            raise
        sections: list[list[Any]] = [list(s) for s in request_sections(request)]

        def save() -> CacheBreak | None:
            with database.write() as session:
                return finish_with_reply(
                    session,
                    turn_id=turn_id,
                    conversation_id=conversation_id,
                    step=step,
                    record=start.record,
                    model_name=model.name,
                    reply=reply,
                    sections=sections,
                    prices=deps.prices,
                    cache_lifetime_s=deps.cache_lifetime_s,
                )

        report_cache_break(metrics, await asyncio.to_thread(save))
        return {"reply": reply.to_dict()}

    @DBOS.step(name="nightowl.run_tool")
    async def run_tool(
        turn_id: str, conversation_id: str, owner_id: str, slot: str, call_data: dict[str, Any]
    ) -> dict[str, Any]:
        metrics.steps.labels(kind="tool").inc()
        return await run_tool_call(deps, turn_id, conversation_id, owner_id, slot, call_data)

    @DBOS.step(name="nightowl.record_answer")
    async def record_answer(
        turn_id: str, conversation_id: str, slot: str, call_data: dict[str, Any], question: str
    ) -> None:
        call = ToolCall.from_dict(call_data)

        def record() -> None:
            with database.write() as session:
                answer = take_answer(session, turn_id, question)
                waited = _duration(deps.answer_wait_s)
                entry = Entry(
                    kind="tool_result",
                    text=answer_for_agent(answer, waited),
                    trust="owner" if answer is not None else "agent",
                    call_id=call.id,
                    tool_name=call.name,
                )
                key = f"{turn_id}:tool:{slot}"
                put_entry(session, conversation_id, turn_id, key, entry.to_dict())
                set_activity(session, turn_id, "thinking")

        metrics.steps.labels(kind="answer").inc()
        await asyncio.to_thread(record)

    @DBOS.step(name="nightowl.tell_user")
    async def tell_user(
        turn_id: str, conversation_id: str, key: str, text: str, once: bool = False
    ) -> None:
        def deliver() -> None:
            with database.write() as session:
                deliver_to_user(
                    session,
                    conversation_id,
                    key=key if once else f"{key}:{turn_id}",
                    body=text,
                    turn_id=turn_id,
                    role="notice",
                )

        await asyncio.to_thread(deliver)

    @DBOS.step(name="nightowl.plan_compaction")
    async def compaction_due(conversation_id: str, turn_id: str) -> bool:
        return await asyncio.to_thread(
            plan_compaction, database, deps.compaction, conversation_id, turn_id
        )

    @DBOS.step(name="nightowl.finish_turn")
    async def record_finish(turn_id: str, status: str, error: str | None) -> None:
        def finish() -> None:
            with database.write() as session:
                finish_turn(session, turn_id, status=status, error=error)

        metrics.steps.labels(kind="finish_turn").inc()
        await asyncio.to_thread(finish)

    async def agent_loop(turn_id: str, conversation_id: str, owner_id: str) -> str:
        calls: list[dict[str, Any]] = []
        step = 0
        while True:
            try:
                outcome = await call_model(turn_id, conversation_id, step, calls)
            except ModelConfigError as error:
                await tell_user(turn_id, conversation_id, "model-error", f"I can't think: {error}")
                return "failed"
            except Exception as error:  # retries exhausted, or a request the provider rejects
                log.warning("model call failed for good", extra={"error": repr(error)[:300]})
                await tell_user(
                    turn_id,
                    conversation_id,
                    "model-error",
                    "I stopped because the model kept failing "
                    f"({_short(error)}). Send a message to try again.",
                )
                return "failed"
            if "stop" in outcome:
                if outcome.get("once"):
                    await tell_user(
                        turn_id, conversation_id, outcome["once"], outcome["stop"], once=True
                    )
                else:
                    await tell_user(turn_id, conversation_id, "guard", outcome["stop"])
                return "stopped"
            reply = ModelReply.from_dict(outcome["reply"])
            if not reply.tool_calls:
                return "done"
            ends = False
            for index, call in enumerate(reply.tool_calls):
                calls.append(call.to_dict())
                slot = f"{step}.{index}"
                if deps.gate and not await deps.gate.clear(
                    turn_id, conversation_id, owner_id, slot, call.to_dict()
                ):
                    continue  # blocked: its result (why, what to do) is recorded
                result = await run_tool(turn_id, conversation_id, owner_id, slot, call.to_dict())
                if result.get("ask"):
                    # A durable wait: no process or thread is held; it outlives restarts, and
                    # the answer (stored first, then sent here as a nudge) resumes it once.
                    question = str(result["ask"]["message_id"])
                    if deps.computers is not None:
                        # The wait may last days: the sandbox freezes (and may sleep deeply)
                        # meanwhile; the next tool call wakes it.
                        await deps.computers.release(turn_id)
                    await DBOS.recv_async(
                        topic=f"answer:{question}", timeout_seconds=deps.answer_wait_s
                    )
                    if deps.gate and result["ask"].get("send"):  # a draft: Send or Discard
                        await deps.gate.finish_send(
                            turn_id,
                            conversation_id,
                            owner_id,
                            slot,
                            call.to_dict(),
                            question,
                            result["ask"]["send"],
                        )
                    else:
                        await record_answer(
                            turn_id, conversation_id, slot, call.to_dict(), question
                        )
                ends = ends or bool(result["ends_turn"])
                if result.get("timer"):
                    timer = result["timer"]
                    await deps.schedule_timer(
                        timer_workflow_id(turn_id, timer["call_id"]),
                        conversation_id,
                        float(timer["seconds"]),
                        str(timer["note"]),
                    )
            if ends:
                return "done"
            step += 1

    @DBOS.workflow(name="nightowl.turn")
    async def turn(turn_id: str) -> str:
        running.enter(turn_id)
        try:
            return await run_turn(turn_id)
        except asyncio.CancelledError:
            # The owner cut in: say so at once (the next turn records what was cut off).
            await asyncio.to_thread(_mark_preempted, database, turn_id)
            metrics.turns_finished.labels(outcome="preempted").inc()
            raise
        finally:
            running.leave(turn_id)
            if deps.computers is not None:
                # The turn is over: its sandbox may freeze (no CPU) until the next tool call.
                await deps.computers.release(turn_id)

    async def run_turn(turn_id: str) -> str:
        started = time.perf_counter()
        metrics.turns_started.inc()
        batch = await take_batch(turn_id)
        conversation_id = batch["conversation_id"]
        with log_context(conversation_id=conversation_id, turn_id=turn_id):
            log.info("turn took its batch", extra={"batch_seqs": batch["seqs"]})
            outcome, error = "done", None
            # An empty batch: a more urgent turn already took these messages.
            if deps.model is not None and batch["seqs"]:
                try:
                    outcome = await agent_loop(turn_id, conversation_id, batch["owner_id"])
                except Exception as failure:
                    # Not a crash (those resume): a bug or a store failure inside a step.
                    log.exception("turn failed")
                    metrics.errors.labels(where="turn").inc()
                    outcome, error = "failed", _short(failure)
                    await tell_user(
                        turn_id,
                        conversation_id,
                        "turn-error",
                        f"Something went wrong and I stopped ({error}). "
                        "Send a message to try again.",
                    )
            status = "failed" if outcome == "failed" else "done"
            await record_finish(turn_id, status, error or (None if status == "done" else outcome))
            if remember is not None and batch["seqs"]:
                # A turn stopped by a budget or the guard, or failed, spends no more on models.
                use_model = pass_uses_model and outcome == "done"
                await remember(turn_id, conversation_id, batch["owner_id"], use_model)
            if deps.schedule_compaction is not None and await compaction_due(
                conversation_id, turn_id
            ):
                # A durable delayed workflow: it compacts only if the conversation stays quiet.
                await deps.schedule_compaction(conversation_id, turn_id, deps.compaction.idle_s)
            metrics.turns_finished.labels(outcome=outcome).inc()
            metrics.turn_seconds.observe(time.perf_counter() - started)
            log.info("turn finished", extra={"outcome": outcome})
            return outcome

    return turn


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:g} hours"
    return f"{seconds:g} seconds"


def _mark_preempted(database: Database, turn_id: str) -> None:
    with database.write() as session:
        mark_preempted(session, turn_id)


def _short(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
