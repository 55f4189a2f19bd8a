"""The agent loop, run as durable steps: one model call, then its tool calls, then the next.

Conversation turns and helpers run this same loop over a *context*: a conversation's
transcript (a helper has a conversation of its own), a run id (the turn's or the helper run's
workflow id, which keys every step), and a profile — the model, instructions, tools and limits
of that kind of run. What to do next is decided by `harness/loop.py` from the steps' typed
results; this module only runs the decisions as DBOS steps.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dbos import DBOS
from opentelemetry.trace import Span
from sqlalchemy.orm import Session

from nightowl.engine.batches import take_guidance
from nightowl.engine.gate import Clearance
from nightowl.engine.model_calls import (
    CallPlace,
    CallStart,
    ModelCalls,
    begin_model_call,
    keep_reply,
    model_step_key,
)
from nightowl.engine.recorded_steps import (
    MODEL_RETRIES,
    ensure_running,
    named_step,
    recorded_step,
)
from nightowl.engine.timers import timer_workflow_id
from nightowl.engine.tool_calls import run_tool_call
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.guard import GuardLimits
from nightowl.harness.loop import (
    AwaitAnswer,
    LoopEnd,
    ModelStep,
    ScheduleTimer,
    StartHelper,
    Stop,
    StopHelpers,
    after_model,
    after_tools,
    follow_ups,
    rerun_asked,
)
from nightowl.harness.notes import newest_note
from nightowl.harness.parrot import ReplyVerdict, judge_reply
from nightowl.harness.pins import pinned_request, server_changes
from nightowl.harness.prompt import PROMPT_STYLES, PromptStyle
from nightowl.messages import Entry, ModelReply, ModelRequest, PromptPin, ToolCall, ToolOutcome
from nightowl.models.base import Model, ModelConfigError
from nightowl.store.conversations import recent_exchanges
from nightowl.store.outages import outlast
from nightowl.store.questions import take_answer
from nightowl.store.step_results import Recorded, recorded_result
from nightowl.store.tables import utcnow
from nightowl.store.transcript import put_entry
from nightowl.store.turns import set_activity
from nightowl.tools.messaging import answer_for_agent
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopProfile:
    """What differs between kinds of run (a conversation's turn, a helper): the model, the
    instructions, the tools it may call (built-in, and the conversation's connectors') and
    its limits."""

    name: str
    model: Model
    instructions: str
    tools: Toolbox
    limits: GuardLimits
    # A helper reads the messages that arrived for it (guidance) before each model call.
    takes_guidance: bool = False
    purpose: str = "turn"  # what its requests say they are (models/base.py ModelRequest)
    style: PromptStyle = PROMPT_STYLES["full"]  # how much of the work log it is shown


@dataclass(frozen=True)
class LoopContext:
    """One run of the loop: its profile, its run id (which keys its steps), the conversation
    whose transcript it reads and writes, and the owner it works for."""

    profile: str
    run_id: str
    conversation_id: str
    owner_id: str
    computer_id: str = ""  # whose computer the tools use ("": the owner's)


@dataclass
class RunState:
    """What a run looks up once and keeps while it runs in this process: its tools (stable
    within a run, except that a connector listing its tools adds them) and the newest note's
    memory part."""

    tools: ToolRegistry | None = None
    # The providers' change count when `tools` was looked up (Toolbox.changes).
    tools_seen: int = -1
    memory: str | None = None
    pin: PromptPin | None = None
    # Its progress was noted since it started in this process (store/turns.py note_progress).
    progressed: bool = False


class HelperControl(Protocol):
    """Starts and stops helper runs (engine/helper_agents.py)."""

    async def start(self, helper_id: str, run_id: str, owner_id: str) -> None: ...

    async def stop(self, run_ids: list[str]) -> None: ...


class AgentLoop:
    """Runs the loop: each side effect a named step (registered with DBOS once per process),
    the order decided by `harness/loop.py`."""

    def __init__(self, deps: TurnDeps, calls: ModelCalls, profiles: list[LoopProfile]) -> None:
        self.deps, self.calls = deps, calls
        self.profiles = {profile.name: profile for profile in profiles}
        self.runs: dict[str, RunState] = {}  # runs going on in this process
        # Not DBOS steps: their results are committed with their writes and found again on
        # a re-run (store/step_results.py), which is all DBOS's own record of them would
        # add, at the cost of two more transactions per step (see docs/architecture.md).
        self._call_model = recorded_step(retries=MODEL_RETRIES)(self.call_model)
        self._run_tool = recorded_step()(self.run_tool)
        self._record_answer = named_step("nightowl.record_answer", self.record_answer)

    async def call_model(
        self,
        profile_name: str,
        run_id: str,
        conversation_id: str,
        step: int,
        calls_so_far: list[dict[str, Any]],
    ) -> ModelStep:
        """Step: the next model call of the run — its request built from the conversation's
        pinned prompt, history and newest note; the reply kept, or asked for again once."""
        profile = self.profiles[profile_name]
        self.deps.metrics.steps.labels(kind="model").inc()
        kept = self.runs.setdefault(run_id, RunState())
        self.calls.follow(run_id)
        begun = (profile, kept, run_id, conversation_id, step, calls_so_far)
        start, tools = await asyncio.to_thread(self._begin_call, *begun)
        if isinstance(start, Recorded):  # committed before a crash: not called again
            return ModelStep.from_dict(start.value)
        if start.stop:
            return ModelStep(stop=Stop(start.stop, start.once))
        kept.memory, kept.pin = start.memory, start.pin
        request, note = _request_of(profile, tools, start, run_id)
        place = CallPlace(conversation_id, run_id, step, start.record)
        keeping = _Keeping(profile, kept, start, note, place)
        _, first = await self.calls.call(
            profile.model,
            request,
            place,
            previous=self.calls.previous(run_id),
            then=lambda session, reply: self._keep_reply(session, reply, keeping, last_try=False),
        )
        verdict = first
        if first is not None and first.reply is None:
            # Asked again with a note at the end (the cached prefix holds), recorded as a
            # call of its own.
            again = replace(
                request,
                messages=(*request.messages, Entry(kind="notice", text=first.note, trust="agent")),
            )
            _, verdict = await self.calls.call(
                profile.model,
                again,
                CallPlace(conversation_id, run_id, step),
                then=lambda session, reply: self._keep_reply(
                    session, reply, keeping, last_try=True
                ),
            )
        assert verdict is not None and verdict.reply is not None  # the last try is kept
        kept.progressed = True
        return ModelStep(reply=verdict.reply)

    def _begin_call(
        self,
        profile: LoopProfile,
        kept: RunState,
        run_id: str,
        conversation_id: str,
        step: int,
        calls_so_far: list[dict[str, Any]],
    ) -> tuple[CallStart | Recorded, ToolRegistry]:
        """The call's start and the pin (both made again if lost: Database.write), with the
        run's tools; or the step's result an earlier attempt committed."""
        with self.deps.database.write(redoable=True) as session:
            # The conversation's tools: built-in and its connectors' (read again when a
            # provider's lists changed or a call named a tool the run did not know).
            tools = _run_tools(kept, profile.tools, session, conversation_id)
            # A step that an earlier attempt of this run committed is replayed as it was,
            # whatever the run's status is now: a run that finished in the store and died
            # before DBOS recorded its end replays to that end (stopping it here would leave
            # its workflow pending, holding its queue).
            earlier = recorded_result(session, model_step_key(run_id, step))
            if earlier is not None:
                return earlier, tools
            # Kept referred to: the session's identity map serves the budget check's (and a
            # helper's guidance's) reads of the turn only while it is.
            _turn = ensure_running(session, run_id)
            if profile.takes_guidance:
                take_guidance(session, run_id)
            return begin_model_call(
                session,
                limits=profile.limits,
                turn_id=run_id,
                conversation_id=conversation_id,
                step=step,
                calls_so_far=calls_so_far,
                model_name=profile.model.name,
                summaries=tools.summaries(),
                specs=tools.specs(),
                groups=tools.groups(),
                instructions=profile.instructions,
                memory=kept.memory,
                pin=kept.pin,
                style=profile.style,
            ), tools

    def _keep_reply(
        self, session: Session, reply: ModelReply, keeping: _Keeping, last_try: bool
    ) -> ReplyVerdict:
        """In the call's transaction: judge the reply (harness/parrot.py `judge_reply`) and
        keep the reply to keep with its call's record."""
        profile, start, place = keeping.profile, keeping.start, keeping.place
        verdict = judge_reply(
            reply,
            start.history,
            purpose=profile.purpose,
            last_try=last_try,
            model_name=profile.model.name,
            recent=lambda: recent_exchanges(session, place.conversation_id),
        )
        if verdict.caught:
            if verdict.caught != "resent":
                self.deps.metrics.parroted_replies.inc()
            log.warning(_CAUGHT[verdict.caught], extra={"run": place.run_id})
        if verdict.reply is not None:
            keep_reply(
                session,
                verdict.reply,
                run_id=place.run_id,
                conversation_id=place.conversation_id,
                step=place.step,
                meta=start.seen,
                progress=not keeping.kept.progressed,
                note=keeping.note,
            )
        return verdict

    async def run_tool(
        self,
        profile_name: str,
        run_id: str,
        conversation_id: str,
        owner_id: str,
        slot: str,
        call_data: dict[str, Any],
        rerun: bool = False,
        computer_id: str = "",
    ) -> ToolOutcome:
        """Step: one tool call (engine/tool_calls.py), with the run's current tools."""
        self.deps.metrics.steps.labels(kind="tool").inc()
        toolbox = self.profiles[profile_name].tools
        kept = self.runs.get(run_id)
        tools: ToolRegistry | None = None
        if kept is not None:
            name = str(call_data.get("name", ""))
            # Most calls: the run's tools are current, and no store read is needed.
            tools = kept.tools if _current(kept, toolbox, name) else None
            if tools is None:
                look_up = (kept, toolbox, conversation_id, name)
                tools = await asyncio.to_thread(self._look_up_tools, *look_up)
        return await run_tool_call(
            self.deps,
            tools or toolbox,
            run_id,
            conversation_id,
            owner_id,
            slot,
            call_data,
            rerun,
            computer_id,
        )

    def _look_up_tools(
        self, kept: RunState, toolbox: Toolbox, conversation_id: str, name: str
    ) -> ToolRegistry:
        with self.deps.database.read() as session:
            return _run_tools(kept, toolbox, session, conversation_id, name)

    async def record_answer(
        self, run_id: str, conversation_id: str, slot: str, call_data: dict[str, Any], question: str
    ) -> None:
        """Step: the owner's answer to a question a tool asked, as that call's result."""
        call = ToolCall.from_dict(call_data)

        def record() -> None:
            with self.deps.database.write() as session:
                answer = take_answer(session, run_id, question)
                waited = _duration(self.deps.answer_wait_s)
                entry = Entry(
                    kind="tool_result",
                    text=answer_for_agent(answer, waited),
                    trust="owner" if answer is not None else "agent",
                    call_id=call.id,
                    tool_name=call.name,
                )
                put_entry(session, conversation_id, run_id, f"{run_id}:tool:{slot}", entry)
                set_activity(session, run_id, "thinking")

        self.deps.metrics.steps.labels(kind="answer").inc()
        await outlast(record)

    async def run(self, context: LoopContext, helpers: HelperControl | None) -> LoopEnd:
        """Run the loop to its end (a workflow's body: every side effect is a step);
        `helpers` starts and stops the helper runs its tool calls ask for."""
        try:
            return await self._run(context, helpers)
        finally:
            self.runs.pop(context.run_id, None)
            self.calls.forget(context.run_id)

    async def _run(self, context: LoopContext, helpers: HelperControl | None) -> LoopEnd:
        calls: list[dict[str, Any]] = []
        step = 0
        while True:
            try:
                model_step = await self._call_model(
                    context.profile, context.run_id, context.conversation_id, step, calls
                )
            except ModelConfigError as error:
                return LoopEnd("failed", error=str(error), config_error=True)
            except Exception as error:  # retries exhausted, or a request the provider rejects
                log.warning("model call failed for good", extra={"error": repr(error)[:300]})
                return LoopEnd("failed", error=failure_text(error))
            decided = after_model(model_step)
            if decided == "stop":
                return LoopEnd("stopped", stop=model_step.stop)
            if decided == "end" or model_step.reply is None:
                return LoopEnd("done")
            outcomes = []
            for index, call in enumerate(model_step.reply.tool_calls):
                calls.append(call.to_dict())
                outcome = await self._tool_call(context, f"{step}.{index}", call, helpers)
                if outcome is not None:
                    outcomes.append(outcome)
            if after_tools(outcomes) == "end":
                return LoopEnd("done")
            step += 1

    async def _tool_call(
        self, context: LoopContext, slot: str, call: ToolCall, helpers: HelperControl | None
    ) -> ToolOutcome | None:
        """One tool call through the safety gate, with what its outcome asks for; None when
        the gate blocked it (its result, why and what to do, is recorded)."""
        traces = self.deps.traces
        known = self.profiles[context.profile].tools.get(call.name)  # a built-in tool's effect
        with traces.tool_call(call, slot, known.effect if known else None) as span:
            outcome = await self._cleared_call(context, slot, call, span)
        if outcome is None:
            return None
        for follow in follow_ups(outcome):
            if isinstance(follow, AwaitAnswer):
                await self._await_answer(context, slot, call, follow)
            elif isinstance(follow, StartHelper) and helpers is not None:
                await helpers.start(follow.helper_id, follow.run_id, context.owner_id)
            elif isinstance(follow, StopHelpers) and helpers is not None:
                await helpers.stop(list(follow.run_ids))
            elif isinstance(follow, ScheduleTimer):
                timer = follow.timer
                await self.deps.schedule_timer(
                    timer_workflow_id(context.run_id, timer.call_id),
                    context.conversation_id,
                    timer.seconds,
                    timer.note,
                )
        return outcome

    async def _cleared_call(
        self, context: LoopContext, slot: str, call: ToolCall, span: Span
    ) -> ToolOutcome | None:
        """The call through the safety gate and the tool-call step (again, if the owner
        approves, when a crash cut it off); None when the gate blocked it."""
        gate, run_id, traces = self.deps.gate, context.run_id, self.deps.traces
        conversation_id, owner_id = context.conversation_id, context.owner_id
        clearance = (
            await gate.clear(run_id, conversation_id, owner_id, slot, call.to_dict())
            if gate
            else Clearance(True, "no gate")
        )
        traces.tool_cleared(span, clearance.decision)
        if not clearance.allowed:
            traces.tool_finished(span, "blocked")
            return None
        where = (context.profile, run_id, conversation_id, owner_id, slot, call.to_dict())
        outcome = await self._run_tool(*where, False, context.computer_id)
        if (
            rerun_asked(outcome)
            and gate
            and await gate.confirm_rerun(run_id, conversation_id, owner_id, slot, call.to_dict())
        ):
            outcome = await self._run_tool(*where, True, context.computer_id)
        traces.tool_finished(
            span, "in doubt" if outcome.in_doubt else "error" if outcome.is_error else "ok"
        )
        return outcome

    async def _await_answer(
        self, context: LoopContext, slot: str, call: ToolCall, wait: AwaitAnswer
    ) -> None:
        """A durable wait: no process or thread is held; it outlives restarts, and the answer
        (stored first, then sent here as a nudge) resumes it once."""
        gate, computers = self.deps.gate, self.deps.computers
        if computers is not None:
            # The wait may last days: the sandbox freezes (and may sleep deeply) meanwhile;
            # the next tool call wakes it.
            await computers.release(context.run_id)
        await DBOS.recv_async(
            topic=f"answer:{wait.question}", timeout_seconds=self.deps.answer_wait_s
        )
        if gate and wait.draft:  # a draft: Send or Discard
            await gate.finish_send(
                context.run_id,
                context.conversation_id,
                context.owner_id,
                slot,
                call.to_dict(),
                wait.question,
                wait.draft,
            )
        else:
            await self._record_answer(
                context.run_id, context.conversation_id, slot, call.to_dict(), wait.question
            )


@dataclass(frozen=True)
class _Keeping:
    """What keeping a model call's reply needs: the run's profile and state, the call's
    start, the newest note the request carried, and where the call is recorded."""

    profile: LoopProfile
    kept: RunState
    start: CallStart
    note: Entry
    place: CallPlace


_CAUGHT = {
    "resent": "a reply sent this turn's message again",
    "receipt": "a reply repeated a send's receipt",
    "repeated": "a reply repeated an earlier message",
}


def _request_of(
    profile: LoopProfile, tools: ToolRegistry, start: CallStart, run_id: str
) -> tuple[ModelRequest, Entry]:
    """The request of a model call and the newest note it carries: the conversation keeps its
    pinned prompt (a cached prefix); the time, what memory recalls and what the server
    changed since reach it as a note in the newest message, kept where it was said
    (harness/notes.py)."""
    summaries, specs, groups = tools.summaries(), tools.specs(), tools.groups()
    changes = server_changes(
        start.pin, profile.instructions, summaries, specs, start.history, groups
    )
    note = newest_note(start.history, run_id, utcnow(), start.memory, changes)
    request = pinned_request(
        start.pin, profile.instructions, summaries, specs, start.history, note, groups
    )
    if profile.purpose != request.purpose:
        request = replace(request, purpose=profile.purpose)
    return request, note


def _run_tools(
    kept: RunState, toolbox: Toolbox, session: Session, conversation_id: str, needed: str = ""
) -> ToolRegistry:
    """The run's tools: as it first found them (the set of tools is stable within a run), read
    again once a connector stored a new listing (load_tools connected it, or its server said
    its tools changed) or when a call names a tool the run does not know (another process
    listed it): connectors' tools are not in the cached prefix, so this changes only notes."""
    if kept.tools is None or not _current(kept, toolbox, needed):
        kept.tools_seen = toolbox.changes()
        kept.tools = toolbox.for_conversation(session, conversation_id)
    return kept.tools


def _current(kept: RunState, toolbox: Toolbox, needed: str = "") -> bool:
    """Whether the run's kept tools are still the conversation's (see `_run_tools`)."""
    if kept.tools is None or kept.tools_seen != toolbox.changes():
        return False
    return not (needed and kept.tools.get(needed) is None and toolbox.providers)


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:g} hours"
    return f"{seconds:g} seconds"


def failure_text(error: BaseException) -> str:
    """A failure in a sentence: DBOS wraps a step's last failure after its retries, so say
    what actually failed (e.g. "the local model crashed (signal SIGSEGV) …")."""
    attempts = getattr(error, "errors", None)
    if isinstance(attempts, list) and attempts and isinstance(attempts[-1], BaseException):
        error = attempts[-1]
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
