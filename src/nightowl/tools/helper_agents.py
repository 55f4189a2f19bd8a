"""Helper tools. The main agent's: start_helper, list_helpers, check_helper, message_helper,
stop_helper — a to-do list of background workers it checks on, guides and stops. A helper's
own: report, the one way its work reaches the main agent.

Starting and stopping a helper's workflow is the agent loop's (engine): these tools record the
helper in the store and say in their result what the loop must start or stop (`meta`), so a
re-run of the tool's step can never start a helper twice.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from nightowl.messages import Entry
from nightowl.safety.provenance import written_trust
from nightowl.store.errors import StoreError
from nightowl.store.helper_agents import (
    ACTIVE,
    MAX_TASK_CHARS,
    HelperInfo,
    active_helpers,
    add_guidance,
    get_helper,
    helper_costs,
    helpers_of,
    start_helper,
)
from nightowl.store.transcript import load_transcript
from nightowl.tools.messaging import attach_files
from nightowl.tools.registry import Tool, ToolContext, ToolResult

MAX_REPORT_CHARS = 2_000
HELPER_TOOLS = ("start_helper", "list_helpers", "check_helper", "message_helper", "stop_helper")
REPORT = "report"


class StartHelperArgs(BaseModel):
    """Arguments of start_helper."""

    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The complete task: the helper sees nothing else (not this conversation, "
        "not the owner). Say what to do, with what, where the inputs are and what the report "
        "must contain.",
    )
    kind: Literal["general", "computer", "isolated"] = Field(
        default="general",
        description="general: works in the owner's computer; computer: also needs a screen "
        "of its own; isolated: its own fresh computer, destroyed after (untrusted code).",
    )
    name: str | None = Field(
        default=None,
        max_length=60,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Give the task to the helper of this name (it keeps what it learned on "
        "earlier tasks), or a new one of this name.",
    )


async def _start_helper(args: StartHelperArgs, ctx: ToolContext) -> ToolResult:
    def store() -> HelperInfo:
        with ctx.database.write() as session:
            # A task written in a turn that read outside text may carry it on.
            trust = written_trust(session, ctx.conversation_id)
            return start_helper(
                session,
                ctx.owner_id,
                ctx.conversation_id,
                args.task,
                kind=args.kind,
                name=args.name,
                key=f"{ctx.turn_id}:{ctx.call_id}",
                trust=trust,
            )

    try:
        helper = await asyncio.to_thread(store)
    except StoreError as error:
        return ToolResult(f"The helper was not started: {error}.", is_error=True)
    return ToolResult(
        f"Helper {helper.label} started on its task ({helper.kind}). Go on with other work: "
        "its report comes back to this conversation by itself. list_helpers and check_helper "
        "show how it is doing; message_helper guides it; stop_helper stops it.",
        meta={"start_helper": {"helper_id": helper.id, "run_id": helper.run_id}},
    )


def _line(helper: HelperInfo, costs: dict[str, tuple[int, float]]) -> str:
    tokens, cost = costs.get(helper.conversation_id, (0, 0.0))
    progress = f" — {helper.progress}" if helper.progress else ""
    return (
        f"- {helper.label}: {helper.status}{progress}. Task: {helper.title} "
        f"[{tokens:,} tokens, ${cost:.2f}; started {helper.created_at:%H:%M}]"
    )


class ListHelpersArgs(BaseModel):
    """Arguments of list_helpers (none)."""


async def _list_helpers(_args: ListHelpersArgs, ctx: ToolContext) -> ToolResult:
    def load() -> tuple[list[HelperInfo], dict[str, tuple[int, float]]]:
        with ctx.database.read() as session:
            found = helpers_of(session, ctx.conversation_id)
            return found, helper_costs(session, [h.conversation_id for h in found])

    found, costs = await asyncio.to_thread(load)
    if not found:
        return ToolResult("No helpers were started in this conversation.")
    return ToolResult("Helpers:\n" + "\n".join(_line(h, costs) for h in found))


class CheckHelperArgs(BaseModel):
    """Arguments of check_helper."""

    helper: str = Field(min_length=1, max_length=100, description="Its id or name.")


def _recent_steps(entries: list[Entry], limit: int = 8) -> list[str]:
    steps = []
    for entry in entries:
        for call in entry.tool_calls:
            steps.append(f"called {call.name}")
        if entry.kind == "tool_result" and entry.is_error:
            steps.append(f"{entry.tool_name} failed")
    return steps[-limit:]


async def _check_helper(args: CheckHelperArgs, ctx: ToolContext) -> ToolResult:
    def load() -> tuple[HelperInfo, list[Entry], dict[str, tuple[int, float]]]:
        with ctx.database.read() as session:
            helper = get_helper(session, ctx.owner_id, args.helper)
            entries = load_transcript(session, helper.conversation_id)
            return helper, entries, helper_costs(session, [helper.conversation_id])

    try:
        helper, entries, costs = await asyncio.to_thread(load)
    except StoreError as error:
        return ToolResult(f"{error}.", is_error=True)
    steps = _recent_steps(entries)
    lines = [_line(helper, costs)]
    lines.append("Recent steps: " + ("; ".join(steps) if steps else "none yet") + ".")
    if helper.report is not None:
        lines.append("Its report came back to this conversation.")
    return ToolResult("\n".join(lines))


class MessageHelperArgs(BaseModel):
    """Arguments of message_helper."""

    helper: str = Field(min_length=1, max_length=100, description="Its id or name.")
    text: str = Field(
        min_length=1, max_length=4_000, description="Guidance it reads before its next step."
    )


async def _message_helper(args: MessageHelperArgs, ctx: ToolContext) -> ToolResult:
    def store() -> HelperInfo:
        with ctx.database.write() as session:
            helper = get_helper(session, ctx.owner_id, args.helper)
            trust = written_trust(session, ctx.conversation_id)
            key = f"guide:{ctx.turn_id}:{ctx.call_id}"
            add_guidance(session, helper, args.text, trust, key)
            return helper

    try:
        helper = await asyncio.to_thread(store)
    except StoreError as error:
        return ToolResult(f"Not delivered: {error}.", is_error=True)
    return ToolResult(f"The helper {helper.label} reads it before its next step.")


class StopHelperArgs(BaseModel):
    """Arguments of stop_helper."""

    helper: str = Field(
        min_length=1, max_length=100, description='Its id or name, or "all" for every helper.'
    )


async def _stop_helper(args: StopHelperArgs, ctx: ToolContext) -> ToolResult:
    def load() -> list[HelperInfo]:
        with ctx.database.read() as session:
            if args.helper == "all":
                return active_helpers(session, ctx.conversation_id)
            return [get_helper(session, ctx.owner_id, args.helper)]

    try:
        found = [h for h in await asyncio.to_thread(load) if h.status in ACTIVE]
    except StoreError as error:
        return ToolResult(f"{error}.", is_error=True)
    if not found:
        return ToolResult("No helper of this conversation is working now; nothing to stop.")
    names = ", ".join(h.label for h in found)
    return ToolResult(
        f"Stopping {names}: each is told, its scratch space cleaned up, and a short note comes "
        "back here.",
        meta={"stop_helpers": [h.run_id for h in found]},
    )


class ReportArgs(BaseModel):
    """Arguments of report."""

    text: str = Field(
        min_length=1,
        max_length=MAX_REPORT_CHARS,
        description=f"What you found or did, at most {MAX_REPORT_CHARS:,} characters: short "
        "by design. Quote a short result exactly as you saw it; put long results in files "
        "and name them.",
    )
    files: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Files you wrote that hold long results (paths in ~); usually none.",
    )


async def _report(args: ReportArgs, ctx: ToolContext) -> ToolResult:
    files = await asyncio.to_thread(attach_files, args.files, ctx)
    if isinstance(files, str):
        return ToolResult(f"Not reported: {files}", is_error=True)
    return ToolResult(
        "Reported. Your work on this task is done.",
        ends_turn=True,
        meta={"report": args.text, "files": files},
    )


HELPER_MANAGER_TOOLS = [
    Tool(
        name="start_helper",
        summary="Hand long or noisy work (many steps, reading, coding) to a background helper "
        "with a complete task description; you keep talking with the owner meanwhile.",
        effect="write",
        arguments=StartHelperArgs,
        run=_start_helper,
        activity="starting a helper",
        idempotent=True,  # the helper's id derives from the call
        output_trust="agent",
    ),
    Tool(
        name="list_helpers",
        summary="The helpers of this conversation: status, last step, tokens and cost.",
        effect="read",
        arguments=ListHelpersArgs,
        run=_list_helpers,
        activity="checking on helpers",
        output_trust="agent",
    ),
    Tool(
        name="check_helper",
        summary="One helper's status and its recent steps.",
        effect="read",
        arguments=CheckHelperArgs,
        run=_check_helper,
        activity="checking on a helper",
        output_trust="agent",
    ),
    Tool(
        name="message_helper",
        summary="Send a working helper guidance it reads before its next step.",
        effect="write",
        arguments=MessageHelperArgs,
        run=_message_helper,
        activity="guiding a helper",
        idempotent=True,  # the message is keyed by the call
        output_trust="agent",
    ),
    Tool(
        name="stop_helper",
        summary='Stop a helper (or "all"): it is told, and its scratch space cleaned up.',
        effect="write",
        arguments=StopHelperArgs,
        run=_stop_helper,
        activity="stopping a helper",
        idempotent=True,
        output_trust="agent",
    ),
]
REPORT_TOOL = Tool(
    name=REPORT,
    summary="Hand your short report (and files) back to the main agent; it ends your task.",
    effect="write",
    arguments=ReportArgs,
    run=_report,
    activity="reporting",
    idempotent=True,
    output_trust="agent",
)
