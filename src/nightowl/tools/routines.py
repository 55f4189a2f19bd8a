"""`create_routine`: the agent proposes a scheduled prompt; it stays inactive until approved."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from nightowl.harness.done_when import DoneWhen
from nightowl.harness.watches import Watch
from nightowl.safety.provenance import written_trust
from nightowl.store.errors import StoreError
from nightowl.store.memory_versions import Author
from nightowl.store.outbox import deliver_to_user
from nightowl.store.routines import create_routine
from nightowl.tools.registry import Tool, ToolContext, ToolResult


class CreateRoutineArgs(BaseModel):
    """Arguments of create_routine."""

    name: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1, max_length=8_000, description="What to do each time.")
    cron: str = Field(description="Five-field cron, e.g. '0 8 * * 1-5' (weekdays 8:00).")
    timezone: str = Field(default="UTC", description="IANA zone, e.g. 'Europe/Berlin'.")
    catch_up: Literal["latest", "all", "none"] = Field(
        default="latest",
        description="Times missed while the server was down: one run for all (latest), each "
        "(all), or none.",
    )
    watch: Watch | None = Field(
        default=None,
        description="Optional check made without the model before each run; the run is "
        "skipped when nothing changed. kind url (target: an http(s) URL), file (a path in "
        "your home) or webhook (a webhook id).",
    )
    done_when: DoneWhen | None = Field(
        default=None,
        description="Optional: what done means for a run, checked when it ends: kind sent "
        "(it sent the owner a message) or file (with path: it wrote that file in your home). "
        "A run without it is recorded as not done, and the next run is told.",
    )
    quiet_hours: Literal["run", "skip"] = Field(
        default="run",
        description="Inside the owner's quiet hours: run (its messages wait until they end) "
        "or skip that time.",
    )


async def _create_routine(args: CreateRoutineArgs, ctx: ToolContext) -> ToolResult:
    def store() -> str:
        with ctx.database.write() as session:
            trust = written_trust(session, ctx.conversation_id, clean="owner")
            routine = create_routine(
                session,
                ctx.owner_id,
                ctx.conversation_id,
                name=args.name,
                prompt=args.prompt,
                cron=args.cron,
                timezone=args.timezone,
                catch_up=args.catch_up,
                watch=args.watch,
                done_when=args.done_when,
                quiet_hours=args.quiet_hours,
                created_by="agent",
                key=f"{ctx.turn_id}:{ctx.call_id}",
                # Proposed in a turn that read outside text: it fires as outside text.
                trust=trust,
                by=Author("agent", ctx.turn_id or None, ctx.conversation_id, trust=trust),
            )
            deliver_to_user(
                session,
                ctx.conversation_id,
                key=f"routine:{ctx.turn_id}:{ctx.call_id}",
                body=(
                    f"I'd like to run the routine **{routine.name}** on `{routine.cron}` "
                    f"({routine.timezone}): {routine.prompt}\n\n"
                    + (
                        f"Before each run it checks {routine.watch.describe()} (without the "
                        "model) and runs only when that changed.\n\n"
                        if routine.watch is not None
                        else ""
                    )
                    + (
                        f"A run counts as done when {routine.done_when.describe()}.\n\n"
                        if routine.done_when is not None
                        else ""
                    )
                    + (
                        "It skips the times that fall in your quiet hours.\n\n"
                        if routine.quiet_hours == "skip"
                        else ""
                    )
                    + "It stays off until you approve it "
                    + f"(`nightowl routines approve {routine.id}`)."
                    + (
                        "\n\nI proposed it after reading content not from you, so it will "
                        "run as outside content: its prompt is treated as data, and risky "
                        "actions in its turns wait for your approval."
                        if routine.trust == "untrusted"
                        else ""
                    )
                ),
                turn_id=ctx.turn_id,
                meta={
                    "controls": {
                        "buttons": [
                            {"label": "Approve", "value": f"approve-routine:{routine.id}"},
                            {"label": "Delete", "value": f"delete-routine:{routine.id}"},
                        ]
                    }
                },
            )
            return routine.id

    try:
        routine_id = await asyncio.to_thread(store)
    except StoreError as error:
        return ToolResult(f"The routine was not created: {error}.", is_error=True)
    return ToolResult(
        f"Routine {routine_id} saved. It will not run until the owner approves it; "
        "they have been asked."
    )


CREATE_ROUTINE = Tool(
    name="create_routine",
    summary="Propose a scheduled prompt (cron); it runs only after the owner approves it.",
    effect="write",
    arguments=CreateRoutineArgs,
    run=_create_routine,
    activity="setting up a routine",
    output_trust="agent",
    idempotent=True,  # the routine's id and its question derive from the call
)
