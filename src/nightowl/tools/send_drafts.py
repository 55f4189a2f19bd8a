"""`send_message` and `pay`: irreversible sends. The agent only proposes; the owner sees a draft
(Send / Discard, the text editable) and the runtime performs it through the sends outbox."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from nightowl.messages import Draft, Question
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import wait_for_answer
from nightowl.tools.registry import Tool, ToolContext, ToolResult


class SendMessageArgs(BaseModel):
    """Arguments of send_message."""

    to: str = Field(min_length=1, max_length=300, description="E-mail address or handle.")
    subject: str = Field(default="", max_length=300)
    text: str = Field(min_length=1, max_length=32_000, description="The message body.")


class PayArgs(BaseModel):
    """Arguments of pay."""

    to: str = Field(min_length=1, max_length=300, description="Payee (account or handle).")
    amount: float = Field(gt=0, le=1_000_000)
    currency: str = Field(min_length=3, max_length=3, description="ISO code, e.g. 'EUR'.")
    memo: str = Field(min_length=1, max_length=2_000, description="What the payment is for.")


async def _propose(
    ctx: ToolContext, tool: str, title: str, draft: str, payload: dict[str, Any]
) -> ToolResult:
    send = Draft(tool, payload)
    meta = {"controls": {"draft": draft, "send": send.to_dict()}}

    def deliver() -> str:
        with ctx.database.write() as session:
            message = deliver_to_user(
                session,
                ctx.conversation_id,
                key=f"draft:{ctx.turn_id}:{ctx.call_id}",
                body=title,
                turn_id=ctx.turn_id,
                meta=meta,
            )
            wait_for_answer(session, ctx.turn_id, message.id, "waiting for you to review a draft")
            return message.id

    message_id = await asyncio.to_thread(deliver)
    return ToolResult(
        "Draft shown to the owner; waiting for Send or Discard.",
        meta={"ask": Question(message_id, send).to_dict()},
    )


async def _send_message(args: SendMessageArgs, ctx: ToolContext) -> ToolResult:
    subject = f" — {args.subject}" if args.subject else ""
    title = f"Draft message to **{args.to}**{subject}. Edit it, then Send or Discard."
    return await _propose(ctx, "send_message", title, args.text, args.model_dump())


async def _pay(args: PayArgs, ctx: ToolContext) -> ToolResult:
    title = (
        f"Payment of **{args.amount:,.2f} {args.currency.upper()}** to **{args.to}**. "
        "The memo below is editable; Send pays, Discard cancels."
    )
    return await _propose(ctx, "pay", title, args.memo, args.model_dump())


def final_payload(payload: dict[str, Any], text: str) -> dict[str, Any]:
    """The payload to send, with the owner's edited draft text in place."""
    field = "memo" if "memo" in payload else "text"
    return {**payload, field: text}


SEND_TOOLS = [
    Tool(
        name="send_message",
        summary="Send an e-mail or message to someone other than the owner; the owner reviews "
        "a draft and presses Send (only when the owner asked you to write to them).",
        effect="send",
        arguments=SendMessageArgs,
        run=_send_message,
        activity="drafting a message",
        output_trust="agent",
        idempotent=True,  # a draft, keyed by the call; the send itself has its own outbox
    ),
    Tool(
        name="pay",
        summary="Pay someone (only when the owner asked); the owner confirms a draft first.",
        effect="spend",
        arguments=PayArgs,
        run=_pay,
        activity="preparing a payment",
        output_trust="agent",
        idempotent=True,  # a draft, keyed by the call; the payment itself has its own outbox
    ),
]
