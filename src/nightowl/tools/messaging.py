"""`send_to_user`: the agent's only visible output, delivered through the outbox exactly once."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from nightowl.store.outbox import deliver_to_user
from nightowl.tools.registry import Tool, ToolContext, ToolResult


class Button(BaseModel):
    """A button the user can press; its value comes back as their answer."""

    label: str = Field(min_length=1, max_length=80)
    value: str = Field(min_length=1, max_length=200)


class SendToUserArgs(BaseModel):
    """Arguments of send_to_user."""

    text: str = Field(min_length=1, max_length=32_000, description="Markdown to show the user.")
    files: list[str] = Field(
        default_factory=list, max_length=10, description="Paths of files to attach."
    )
    buttons: list[Button] = Field(
        default_factory=list, max_length=6, description="Optional answers the user can click."
    )
    draft: str | None = Field(
        default=None, max_length=32_000, description="Optional editable draft (Send / Discard)."
    )
    final: bool = Field(default=False, description="True ends the turn after this message.")
    important: bool = Field(
        default=False, description="True raises a notification (for background work)."
    )
    kind: Literal["message"] = "message"


async def _send_to_user(args: SendToUserArgs, ctx: ToolContext) -> ToolResult:
    controls: dict[str, object] = {}
    if args.buttons:
        controls["buttons"] = [b.model_dump() for b in args.buttons]
    if args.draft is not None:
        controls["draft"] = args.draft
    meta = {"files": args.files, "controls": controls, "important": args.important}

    def deliver() -> int:
        with ctx.database.write() as session:
            return deliver_to_user(
                session,
                ctx.conversation_id,
                key=f"out:{ctx.turn_id}:{ctx.call_id}",
                body=args.text,
                turn_id=ctx.turn_id,
                meta=meta,
            ).seq

    seq = await asyncio.to_thread(deliver)
    return ToolResult(f"Delivered to the user (message #{seq}).", ends_turn=args.final)


SEND_TO_USER = Tool(
    name="send_to_user",
    summary="Show the user a message (markdown, files, buttons or a draft); your only visible "
    "output. final=true ends the turn.",
    effect="write",
    arguments=SendToUserArgs,
    run=_send_to_user,
)
