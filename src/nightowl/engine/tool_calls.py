"""What the tool-call step does: record the run, substitute secrets, run the tool in its
context, redact and store the result (a large one as a blob with a preview), and remember a
timer it set. Called by the turn workflow's `run_tool` step (engine/turn.py).

Exactly once, as far as the store can tell: the step's result is committed with the tool's
transcript entry (store/step_results.py), so a re-run after a crash returns it instead of
running the tool again. A run that started and never finished (the process died while the
tool ran) is *in doubt*: a tool that is safe to repeat runs again; any other is reported to
the agent as "may have happened" and runs again only with the owner's approval.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from nightowl.engine.recorded_steps import stop_unless_running
from nightowl.engine.timers import timer_workflow_id
from nightowl.engine.turn_deps import TurnDeps
from nightowl.evals.capture import TOOL_ERRORS_IN_A_ROW, Flag, failing_in_a_row, flag_failure
from nightowl.harness.outputs import is_large, preview
from nightowl.messages import Entry, ToolCall, ToolOutcome
from nightowl.store.blobs import put_text
from nightowl.store.database import Database
from nightowl.store.output_blobs import record_output_blob
from nightowl.store.step_results import Recorded, record_result
from nightowl.store.tables import utcnow
from nightowl.store.tool_steps import tool_step_state
from nightowl.store.transcript import (
    finish_tool_run,
    load_turn_entries,
    put_entry,
    start_tool_run,
)
from nightowl.store.turns import set_activity
from nightowl.store.wakes import record_timer
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult
from nightowl.tools.secret_scope import SecretScope

log = logging.getLogger(__name__)


def tool_entry_key(turn_id: str, slot: str) -> str:
    """The transcript key of a tool call's result (`slot` is "<step>.<index>")."""
    return f"{turn_id}:tool:{slot}"


def in_doubt_text(tool: str) -> str:
    """The result an interrupted call with an effect gets, in words the agent can act on."""
    return (
        f"Unknown outcome: the server restarted while {tool} was running, so it may or may "
        "not have taken effect. It was not run again. Check whether it happened (look at the "
        "result where you can) before doing it again, or tell the owner."
    )


async def run_tool_call(
    deps: TurnDeps,
    tools: Toolbox | ToolRegistry,
    turn_id: str,
    conversation_id: str,
    owner_id: str,
    slot: str,
    call_data: dict[str, Any],
    rerun: bool = False,
    computer_id: str = "",
) -> ToolOutcome:
    """Run one tool call of a run of the loop and store its result: `tools` are those this
    run may call (a helper's are not a turn's); `rerun`: the owner approved running a call in
    doubt again."""
    # `slot` names this call uniquely within the turn; providers' own call ids may repeat
    # (small local models number every reply's calls from zero).
    call = ToolCall.from_dict(call_data)
    entry_key = tool_entry_key(turn_id, slot)
    step_key = f"{entry_key}:again" if rerun else entry_key

    def start() -> Recorded | _Started:
        # One trip to a thread for all the call needs before it runs: the tools the
        # conversation may use now (read before the write transaction), the owner's secrets
        # and the run's record.
        registry = (
            tools
            if isinstance(tools, ToolRegistry)
            else conversation_tools(deps.database, tools, conversation_id)
        )
        tool = registry.get(call.name)
        with deps.database.write(redoable=redoable(tool)) as session:
            state = tool_step_state(session, step_key, turn_id)
            if state.recorded is not None:
                return state.recorded
            stop_unless_running(turn_id, state.run_status)
            died = state.unfinished
            # Opened before the run is recorded: a vault that does not open fails the step
            # without leaving a run that looks cut off by a crash.
            sealed = deps.gate.sealed(session, owner_id) if deps.gate else []
            scope = deps.gate.scope_of(owner_id, sealed) if deps.gate else SecretScope()
            read = None
            if tool is not None:
                set_activity(session, turn_id, tool.activity)
                # What the tool needs from the store (a connector's current settings).
                read = tool.read_before(session) if tool.read_before else None
            effect = tool.effect if tool else "read"
            run_id = start_tool_run(
                session, conversation_id, turn_id, call.id, call.name, effect, step_key
            )
        return _Started(registry, tool, effect, scope, run_id, died, read)

    started = await asyncio.to_thread(start)
    if isinstance(started, Recorded):
        return ToolOutcome.from_dict(started.value)
    registry, tool, effect, scope = started.registry, started.tool, started.effect, started.scope
    run_id, died = started.run_id, started.died
    if died and tool is not None and not tool.safe_to_repeat:
        log.warning("a tool run was cut off by a crash", extra={"tool": call.name})
        result = ToolResult(
            in_doubt_text(call.name), is_error=True, meta={"in_doubt": True, "trust": "agent"}
        )
    else:
        result = await _run(
            deps,
            scope,
            registry,
            tool,
            call,
            turn_id,
            conversation_id,
            owner_id,
            slot,
            effect,
            computer_id,
            started.read,
        )
    trust = result_trust(tool, result)
    content, meta = result.content, dict(result.meta)
    if scope.redactor:
        deps.traces.scrub_with(owner_id, scope.redactor.redact)
    deps.traces.tool_ran(effect, content)
    if is_large(content):
        reference = await asyncio.to_thread(put_text, deps.blob_dir, content)
        content = preview(content, reference)
        # The safety checks read the whole output, not only the preview the model sees.
        meta["blob"] = reference
    ask = result.meta.get("ask")
    outcome = ToolOutcome.from_dict(
        {
            "is_error": result.is_error,
            "ends_turn": result.ends_turn,
            "timer": result.meta.get("timer"),
            "ask": ask,
            "in_doubt": bool(result.meta.get("in_doubt")),
            "start_helper": result.meta.get("start_helper"),
            "stop_helpers": result.meta.get("stop_helpers"),
        }
    )

    def save() -> None:
        with deps.database.write(redoable=redoable(tool)) as session:
            if not ask:  # a question's result is its answer, saved once it comes
                entry = Entry(
                    kind="tool_result",
                    text=content,
                    trust=trust,
                    call_id=call.id,
                    tool_name=call.name,
                    is_error=result.is_error,
                    meta=meta,
                )
                put_entry(session, conversation_id, turn_id, entry_key, entry)
            if "blob" in meta:
                record_output_blob(session, owner_id, meta["blob"], trust)
            finish_tool_run(session, run_id, result.is_error)
            if result.is_error and failing_in_a_row(load_turn_entries(session, turn_id)):
                why = f"{TOOL_ERRORS_IN_A_ROW} tool calls in a row failed, the last {call.name}"
                flag = Flag("tool_error_loop", conversation_id, turn_id, why, f"{turn_id}:errors")
                flag_failure(session, flag, deps.gate.deps.vault_key if deps.gate else None)
            timer = outcome.timer
            if timer:  # remembered so the server knows what will wake the conversation
                record_timer(
                    session,
                    timer_workflow_id(turn_id, timer.call_id),
                    conversation_id,
                    utcnow() + timedelta(seconds=timer.seconds),
                    timer.note,
                )
            record_result(session, step_key, outcome.to_dict())

    await asyncio.to_thread(save)
    return outcome


@dataclass(frozen=True)
class _Started:
    """What a tool call's first write found and made: the tools it may use, its tool (None:
    unknown), that tool's effect, the owner's secrets, the run's id, whether an earlier
    attempt of the same step died while its tool ran, and what the tool read before it runs
    (`Tool.read_before`)."""

    registry: ToolRegistry
    tool: Tool | None
    effect: str
    scope: SecretScope
    run_id: str
    died: bool
    read: Any = None


def redoable(tool: Tool | None) -> bool:
    """Whether the records of a call of `tool` may be lost with a database crash: the call
    is then simply run again (a tool safe to repeat; an unknown tool only says so). A call
    of any other tool records its start durably before it runs (its effect may happen)."""
    return tool is None or tool.safe_to_repeat


def result_trust(tool: Tool | None, result: ToolResult) -> str:
    """Where a result's text came from: what the tool declares, unless the result says."""
    if result.meta.get("untrusted"):
        return "untrusted"
    declared = result.meta.get("trust") or (tool.output_trust if tool else "agent")
    return "untrusted" if declared not in ("agent", "owner") else str(declared)


def conversation_tools(database: Database, tools: Toolbox, conversation_id: str) -> ToolRegistry:
    """Every tool the conversation may use now: built-in and its connectors' (tools/providers)."""
    if not tools.providers:
        return tools.builtin
    with database.read() as session:
        return tools.for_conversation(session, conversation_id)


async def _run(
    deps: TurnDeps,
    scope: SecretScope,
    registry: ToolRegistry,
    tool: Tool | None,
    call: ToolCall,
    turn_id: str,
    conversation_id: str,
    owner_id: str,
    slot: str,
    effect: str,
    computer_id: str = "",
    read: Any = None,
) -> ToolResult:
    """Run the tool with secrets substituted in its arguments and redacted from its result."""
    parsed = scope.parse(registry, call.name, effect, call.arguments)
    if isinstance(parsed, ToolResult):  # nightowl's own words: what was wrong with the call
        # (`loaded`: the answer loads the tool's schema, see tools/registry.py)
        return replace(scope.redact_result(parsed), meta={**parsed.meta, "trust": "agent"})
    assert tool is not None
    context = ToolContext(
        database=deps.database,
        blob_dir=deps.blob_dir,
        conversation_id=conversation_id,
        owner_id=owner_id,
        turn_id=turn_id,
        call_id=slot,
        home=deps.homes_dir / (computer_id or owner_id),
        max_attachment_bytes=deps.max_attachment_bytes,
        computers=deps.computers,
        redaction=scope.redactor.spec() if scope.redactor else None,  # safety: secrets
        tools=registry,
        computer_id=computer_id,
        read_before=read,
    )
    try:
        result = await tool.run(parsed, context)
    except Exception as error:
        log.warning("tool failed", extra={"tool": call.name, "error": scope.trace()})
        result = ToolResult(
            f"{call.name} failed: {error}. Try different arguments or another way.",
            is_error=True,
        )
    # The computer came back from an older snapshot (its host died): the agent must know.
    notice = deps.computers.take_notice(turn_id) if deps.computers is not None else None
    if notice:
        result = replace(result, content=f"{notice}\n{result.content}")
    return scope.redact_result(result)
