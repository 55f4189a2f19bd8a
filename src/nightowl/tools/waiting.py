"""`wait`: pause for a while, e.g. to let a background process make progress."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from nightowl.tools.registry import Tool, ToolContext, ToolResult


class WaitArgs(BaseModel):
    """Arguments of wait."""

    seconds: float = Field(gt=0, le=600, description="How long to wait (at most 600 s).")


async def _wait(args: WaitArgs, _ctx: ToolContext) -> ToolResult:
    await asyncio.sleep(args.seconds)
    return ToolResult(f"Waited {args.seconds:g} seconds.")


WAIT = Tool(
    name="wait",
    summary="Pause for up to 10 minutes, e.g. while something in the background progresses.",
    effect="read",
    arguments=WaitArgs,
    run=_wait,
    activity="waiting",
    output_trust="agent",
)
