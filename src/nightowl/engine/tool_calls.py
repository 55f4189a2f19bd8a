"""What the tool-call step does: record the run, substitute secrets, run the tool in its
context, redact and store the result (a large one as a blob with a preview), and remember a
timer it set. Called by the turn workflow's `run_tool` step (engine/turn.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from nightowl.engine.timers import timer_workflow_id
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.outputs import is_large, preview
from nightowl.harness.transcript import Entry, ToolCall
from nightowl.safety.vault import SecretScope
from nightowl.store.blobs import put_text
from nightowl.store.tables import utcnow
from nightowl.store.transcript import finish_tool_run, put_entry, start_tool_run
from nightowl.store.turns import set_activity
from nightowl.store.wakes import record_timer
from nightowl.tools.registry import ToolContext, ToolResult

log = logging.getLogger(__name__)


async def run_tool_call(
    deps: TurnDeps,
    turn_id: str,
    conversation_id: str,
    owner_id: str,
    slot: str,
    call_data: dict[str, Any],
) -> dict[str, Any]:
    """Run one tool call of a turn and store its result; what the agent loop needs to know."""
    # `slot` ("<step>.<index>") names this call uniquely within the turn; providers' own
    # call ids may repeat (small local models number every reply's calls from zero).
    call = ToolCall.from_dict(call_data)
    tool = deps.tools.get(call.name)
    effect = tool.effect if tool else "read"

    def start() -> str:
        with deps.database.write() as session:
            if tool is not None:
                set_activity(session, turn_id, tool.activity)
            return start_tool_run(session, conversation_id, turn_id, call.id, call.name, effect)

    run_id = await asyncio.to_thread(start)
    # Secrets are substituted only here, and every value is redacted from what comes back.
    scope = await asyncio.to_thread(deps.gate.secrets, owner_id) if deps.gate else SecretScope()
    parsed = scope.parse(deps.tools, call.name, effect, call.arguments)
    if isinstance(parsed, ToolResult):
        result = parsed
    else:
        assert tool is not None
        context = ToolContext(
            database=deps.database,
            blob_dir=deps.blob_dir,
            conversation_id=conversation_id,
            owner_id=owner_id,
            turn_id=turn_id,
            call_id=slot,
            home=deps.homes_dir / owner_id,
            max_attachment_bytes=deps.max_attachment_bytes,
            computers=deps.computers,
        )
        try:
            result = await tool.run(parsed, context)
        except Exception as error:
            log.warning("tool failed", extra={"tool": call.name, "error": scope.trace()})
            result = ToolResult(
                f"{call.name} failed: {error}. Try different arguments or another way.",
                is_error=True,
            )
    result = scope.redact_result(result)
    content = result.content
    if is_large(content):
        reference = await asyncio.to_thread(put_text, deps.blob_dir, content)
        content = preview(content, reference)
    ask = result.meta.get("ask")

    def save() -> None:
        with deps.database.write() as session:
            if not ask:  # a question's result is its answer, saved once it comes
                entry = Entry(
                    kind="tool_result",
                    text=content,
                    trust="untrusted" if result.meta.get("untrusted") else "agent",
                    call_id=call.id,
                    tool_name=call.name,
                    is_error=result.is_error,
                    meta=result.meta,
                )
                key = f"{turn_id}:tool:{slot}"
                put_entry(session, conversation_id, turn_id, key, entry.to_dict())
            finish_tool_run(session, run_id, result.is_error)
            timer = result.meta.get("timer")
            if timer:  # remembered so the server knows what will wake the conversation
                record_timer(
                    session,
                    timer_workflow_id(turn_id, timer["call_id"]),
                    conversation_id,
                    utcnow() + timedelta(seconds=float(timer["seconds"])),
                    str(timer["note"]),
                )

    await asyncio.to_thread(save)
    return {
        "is_error": result.is_error,
        "ends_turn": result.ends_turn,
        "timer": result.meta.get("timer"),
        "ask": ask,
    }
