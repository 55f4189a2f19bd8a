"""The turn workflow: take the batch, run the agent loop over the conversation, finish.

The loop itself (one durable step per model call and per tool call) is `engine/agent_loop.py`,
shared with helpers; its decisions come from the pure `harness`. A crash resumes at the first
unfinished step and a finished step is never run again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dbos import DBOS

from nightowl.engine.agent_loop import (
    AgentLoop,
    HelperControl,
    LoopContext,
    LoopProfile,
    failure_text,
)
from nightowl.engine.batches import Batch, take_turn_batch
from nightowl.engine.compaction import compaction_wanted
from nightowl.engine.durable import TurnWorkflow
from nightowl.engine.memory_pass import build_memory_pass, is_local
from nightowl.engine.model_calls import ModelCalls
from nightowl.engine.parking import TurnParking
from nightowl.engine.routine_done import check_runs
from nightowl.engine.turn_deps import TurnDeps
from nightowl.evals.capture import Flag, flag_failure
from nightowl.harness.loop import LoopEnd
from nightowl.harness.prompt import instructions_for, style_of
from nightowl.logs import log_context
from nightowl.models.base import Model
from nightowl.store.database import Database
from nightowl.store.outages import outlast
from nightowl.store.outbox import deliver_to_user
from nightowl.store.turns import finish_turn, mark_preempted, other_running_turns
from nightowl.tools.helper_agents import REPORT
from nightowl.tools.providers import Toolbox

log = logging.getLogger(__name__)

TURN_WORKFLOW = "nightowl.turn"
TURN_PROFILE = "turn"


def turn_profile(model: Model, deps: TurnDeps) -> LoopProfile:
    """A conversation turn's profile: the agent's model, instructions, tools (built-in and
    the conversation's connectors', but not a helper's own `report`) and limits."""
    tools = Toolbox(deps.tools.builtin.without({REPORT}), deps.tools.providers)
    # The model's adapter names its prompt style: a small local model gets short instructions
    # and less of the work log (harness/prompt.py).
    return LoopProfile(
        TURN_PROFILE, model, instructions_for(model), tools, deps.limits, style=style_of(model)
    )


def build_turn_workflow(
    deps: TurnDeps, loop: AgentLoop, calls: ModelCalls, helpers: HelperControl | None = None
) -> TurnWorkflow:
    """Register the turn workflow and its own steps with DBOS and return the workflow
    (`helpers`: what starts and stops the helper runs a turn's tool calls ask for)."""
    database, metrics, running = deps.database, deps.metrics, deps.running
    vault_key = deps.gate.deps.vault_key if deps.gate is not None else None
    remember = build_memory_pass(database, deps.model, calls) if deps.model is not None else None
    pass_uses_model = deps.memory_pass == "on" or (
        deps.memory_pass == "auto" and deps.model is not None and not is_local(deps.model)
    )

    @DBOS.step(name="nightowl.take_batch")
    async def take_batch(turn_id: str) -> Batch:
        def still_stopping() -> bool:
            with database.read() as session:
                return bool(other_running_turns(session, turn_id))

        # A preempted turn's task marks itself stopped within milliseconds; wait for that so
        # two turns of a conversation never overlap (a turn of a dead worker: give up waiting).
        for _ in range(100):
            if not await outlast(still_stopping):
                break
            await asyncio.sleep(0.02)

        def claim() -> Batch:
            with database.write() as session:
                return take_turn_batch(session, turn_id)

        metrics.steps.labels(kind="take_batch").inc()
        return await outlast(claim)

    @DBOS.step(name="nightowl.tell_user")
    async def tell_user(
        turn_id: str, conversation_id: str, key: str, text: str, once: bool = False
    ) -> None:
        def deliver() -> None:
            with database.write() as session:
                if key == "guard":  # the guard stopped the turn: a draft eval case
                    flag = Flag("guard_stop", conversation_id, turn_id, text, turn_id)
                    flag_failure(session, flag, vault_key)
                deliver_to_user(
                    session,
                    conversation_id,
                    key=key if once else f"{key}:{turn_id}",
                    body=text,
                    turn_id=turn_id,
                    role="notice",
                )

        await outlast(deliver)

    @DBOS.step(name="nightowl.finish_turn")
    async def record_finish(
        turn_id: str, conversation_id: str, status: str, error: str | None
    ) -> bool:
        """Record how the turn ended; True when the conversation is due a compaction (planned
        in the same transaction: one step at the end of every turn, not two)."""

        def finish() -> bool:
            with database.write() as session:
                finish_turn(session, turn_id, status=status, error=error)
                check_runs(session, turn_id, deps.homes_dir)  # a routine's run: was it done?
                return deps.schedule_compaction is not None and compaction_wanted(
                    session, deps.compaction, conversation_id, turn_id
                )

        metrics.steps.labels(kind="finish_turn").inc()
        return await outlast(finish)

    async def say_how_it_ended(turn_id: str, conversation_id: str, end: LoopEnd) -> None:
        """What the owner hears when the loop did not finish: a stop (a budget speaks once a
        day), or a model that kept failing."""
        if end.outcome == "stopped" and end.stop is not None:
            if end.stop.once:
                await tell_user(turn_id, conversation_id, end.stop.once, end.stop.message, True)
            else:
                await tell_user(turn_id, conversation_id, "guard", end.stop.message)
        elif end.outcome == "failed":
            text = (
                f"I can't think: {end.error}"
                if end.config_error
                else f"I stopped because the model kept failing ({end.error}). "
                "Send a message to try again."
            )
            await tell_user(turn_id, conversation_id, "model-error", text)

    parking = TurnParking(database, metrics, deps.max_recoveries)

    # Crash loops are stopped by `parking` (engine/parking.py); DBOS's own limit would also
    # count restarts while a turn waits days for an answer.
    @DBOS.workflow(name=TURN_WORKFLOW, max_recovery_attempts=None)
    async def turn(turn_id: str) -> str:
        running.enter(turn_id)
        try:
            # Its first write: a database going away now must not fail the workflow (DBOS
            # would end it with the error and leave the turn queued for good).
            if await outlast(parking.start_or_park, turn_id):
                return "parked"
            return await run_turn(turn_id)
        except asyncio.CancelledError:
            if running.closing:
                raise  # the process is stopping: the turn resumes after it, as it was
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
        conversation_id = batch.conversation_id
        with (
            log_context(conversation_id=conversation_id, turn_id=turn_id),
            deps.traces.agent_run(TURN_PROFILE, turn_id, conversation_id) as span,
        ):
            log.info("turn took its batch", extra={"batch_seqs": batch.seqs})
            outcome, error = "done", None
            # An empty batch: a more urgent turn already took these messages.
            if deps.model is not None and batch.seqs:
                context = LoopContext(TURN_PROFILE, turn_id, conversation_id, batch.owner_id)
                try:
                    end = await loop.run(context, helpers)
                    await say_how_it_ended(turn_id, conversation_id, end)
                    outcome = end.outcome
                except Exception as failure:
                    # Not a crash (those resume): a bug or a store failure inside a step.
                    log.exception("turn failed")
                    metrics.errors.labels(where="turn").inc()
                    outcome, error = "failed", failure_text(failure)
                    await tell_user(
                        turn_id,
                        conversation_id,
                        "turn-error",
                        f"Something went wrong and I stopped ({error}). "
                        "Send a message to try again.",
                    )
            status = "failed" if outcome == "failed" else "done"
            due = await record_finish(
                turn_id, conversation_id, status, error or (None if status == "done" else outcome)
            )
            if remember is not None and batch.seqs:
                # A turn stopped by a budget or the guard, or failed, spends no more on models.
                use_model = pass_uses_model and outcome == "done"
                await remember(turn_id, conversation_id, batch.owner_id, use_model)
            if due and deps.schedule_compaction is not None:
                # A durable delayed workflow: it compacts only if the conversation stays quiet.
                await deps.schedule_compaction(conversation_id, turn_id, deps.compaction.idle_s)
            deps.traces.run_ended(span, outcome, error)
            metrics.turns_finished.labels(outcome=outcome).inc()
            metrics.turn_seconds.observe(time.perf_counter() - started)
            log.info("turn finished", extra={"outcome": outcome})
            return outcome

    return turn


def _mark_preempted(database: Database, turn_id: str) -> None:
    with database.write() as session:
        mark_preempted(session, turn_id)
