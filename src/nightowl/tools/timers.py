"""`set_timer`: "remind me in 3 hours" becomes a durable wake-up of this conversation."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nightowl.tools.registry import Tool, ToolContext, ToolResult

MAX_DELAY_SECONDS = 366 * 24 * 3600


class SetTimerArgs(BaseModel):
    """Arguments of set_timer."""

    seconds: float = Field(gt=0, le=MAX_DELAY_SECONDS, description="Delay from now, in seconds.")
    note: str = Field(
        min_length=1, max_length=500, description="What the timer is for; you will see it then."
    )


async def _set_timer(args: SetTimerArgs, ctx: ToolContext) -> ToolResult:
    # The turn workflow schedules the wake-up itself (a durable, delayed child workflow), so a
    # re-run of this step can never schedule it twice.
    return ToolResult(
        f"Timer set: in {args.seconds:g} s this conversation wakes with the note {args.note!r}.",
        meta={"timer": {"seconds": args.seconds, "note": args.note, "call_id": ctx.call_id}},
    )


SET_TIMER = Tool(
    name="set_timer",
    summary="Wake this conversation after a delay with a note (reminders, follow-ups).",
    effect="write",
    arguments=SetTimerArgs,
    run=_set_timer,
    activity="setting a timer",
    output_trust="agent",
    idempotent=True,  # the timer's workflow id derives from the call
)
