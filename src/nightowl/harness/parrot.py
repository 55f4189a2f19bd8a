"""The parrot guard (pure): a reply that repeats, word for word, something the agent told the
owner before, while the owner asked something new, is not sent; nor is a reply that sends the
owner the receipt of a message already sent.

Small models copy text they see (an earlier reply in the work log, an example in the
instructions, the tool result they just got) instead of answering. A reply that sends again
what this turn already sent is dropped (`resent`, `without_sends`: the turn ends). The loop
asks again once with a note (`RETRY_NOTE`, `RECEIPT_NOTE`); a second copy of an earlier
message is replaced by `could_not`, which tells the owner plainly and how to use a stronger
model; a second copied receipt is dropped (`without_sends`: the owner has the message already).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from nightowl.messages import Entry, ModelReply, ToolCall

SHORTEST = 24  # shorter replies ("Done.", "OK, noted.") repeat legitimately

RETRY_NOTE = (
    "Your reply was not sent: it repeated, word for word, a message you sent the owner "
    "before, but the owner asked something new. Read the owner's newest message again and "
    "answer that message itself."
)


RECEIPT_NOTE = (
    "Your reply was not sent: it repeated the receipt of a message you already sent "
    '("Delivered to the user ..."). The owner has that message. Tell the owner something '
    "new, or end your turn without sending anything."
)


def normalise(text: str) -> str:
    """Text compared without case or spacing differences."""
    return " ".join(text.split()).casefold()


def _sent_texts(calls: Sequence[ToolCall]) -> list[str]:
    return [str(call.arguments.get("text", "")) for call in calls if call.name == "send_to_user"]


def told(reply: ModelReply) -> list[str]:
    """What the reply's `send_to_user` calls would show the owner."""
    return _sent_texts(reply.tool_calls)


def checkable(reply: ModelReply) -> bool:
    """Whether the reply tells the owner anything long enough to be a copy (only then is
    what was said before worth reading)."""
    return any(len(normalise(text)) >= SHORTEST for text in told(reply))


def newest_ask(history: Sequence[Entry]) -> str:
    """The newest message from a person in the history ("" when there is none)."""
    return next((e.text for e in reversed(history) if e.kind == "user"), "")


def repeated(
    reply: ModelReply, newest: str, said_before: Sequence[str], asked_before: Sequence[str]
) -> str | None:
    """The earlier message the reply repeats word for word, when the owner's newest message
    (`newest`) is not itself a question asked before; else None. `said_before` are the
    agent's earlier visible messages, `asked_before` the owner's (the newest among them)."""
    ask = normalise(newest)
    if not ask or sum(normalise(a) == ask for a in asked_before) > 1:
        return None  # the same question again: the same answer is right
    earlier = {normalise(text): text for text in said_before}
    for text in told(reply):
        key = normalise(text)
        if len(key) >= SHORTEST and key in earlier:
            return earlier[key]
    return None


def sent_since_asked(history: Sequence[Entry]) -> list[str]:
    """What the agent sent the owner since the newest message from a person (this turn's
    sends, when that message woke it)."""
    sent: list[str] = []
    for entry in reversed(history):
        if entry.kind == "user":
            break
        if entry.kind == "assistant":
            sent.extend(_sent_texts(entry.tool_calls))
    return sent


def resent(reply: ModelReply, history: Sequence[Entry]) -> bool:
    """Whether the reply sends again, word for word, what it sent since the owner's newest
    message: the owner has it, and the turn is over (a small model that did not say its
    answer was final is called again, and sends the answer a second time)."""
    already = {normalise(text) for text in sent_since_asked(history)}
    return any(normalise(text) in already for text in told(reply))


def _numbers_masked(text: str) -> str:
    return re.sub(r"\d+", "#", normalise(text))


def echoed_receipt(reply: ModelReply, history: Sequence[Entry]) -> str | None:
    """The `send_to_user` text of the reply that copies the receipt of an earlier send (any
    message number: "Delivered to the user (message #7)."), or None."""
    receipts = {
        _numbers_masked(entry.text)
        for entry in history
        if entry.kind == "tool_result" and entry.tool_name == "send_to_user"
    }
    for text in told(reply):
        if len(normalise(text)) >= SHORTEST and _numbers_masked(text) in receipts:
            return text
    return None


def without_sends(reply: ModelReply) -> ModelReply:
    """The reply without its `send_to_user` calls (a copied receipt is not sent twice)."""
    calls = tuple(call for call in reply.tool_calls if call.name != "send_to_user")
    return replace(reply, tool_calls=calls)


def could_not(reply: ModelReply, model_name: str) -> ModelReply:
    """The reply to send instead of a second copy: the owner is told plainly."""
    text = (
        f"I could not answer this properly: the model I run on ({model_name}) repeated an "
        "earlier reply instead of answering your message. A stronger model does better: set "
        "NIGHTOWL_MODEL (for example anthropic:claude-sonnet-4-5 with ANTHROPIC_API_KEY, or "
        "openai:gpt-4.1-mini with OPENAI_API_KEY; see docs/models.md) and restart the server."
    )
    call = ToolCall(id="call_parrot", name="send_to_user", arguments={"text": text, "final": True})
    return replace(reply, text="", tool_calls=(call,))


@dataclass(frozen=True)
class ReplyVerdict:
    """Whether to keep a model's reply: the reply to keep (perhaps changed: its sends
    dropped, or replaced by `could_not`), or None to ask again once with `note` at the end;
    `caught` names what the guard caught ("resent", "receipt", "repeated"; "" for nothing)."""

    reply: ModelReply | None
    note: str = ""
    caught: str = ""


def judge_reply(
    reply: ModelReply,
    history: Sequence[Entry],
    *,
    purpose: str,
    last_try: bool,
    model_name: str,
    recent: Callable[[], tuple[Sequence[str], Sequence[str]]],
) -> ReplyVerdict:
    """The reply-keeping policy: keep the reply unless it parrots an earlier message (a
    conversation's turn) or a send's receipt; then ask again once, and the second time keep
    what tells the owner the model could not do it (a copied receipt: the reply without its
    sends). A reply that sends again this turn's message keeps only its other calls (the
    turn ends). `recent` gives the agent's and the owner's recent messages, read only when a
    turn's reply could be a copy."""
    if resent(reply, history):
        return ReplyVerdict(without_sends(reply), caught="resent")
    if checkable(reply) and echoed_receipt(reply, history) is not None:
        if not last_try:
            return ReplyVerdict(None, RECEIPT_NOTE, "receipt")
        return ReplyVerdict(without_sends(reply), caught="receipt")
    if purpose == "turn" and checkable(reply):
        said, asked = recent()
        if repeated(reply, newest_ask(history), said, asked) is not None:
            if not last_try:
                return ReplyVerdict(None, RETRY_NOTE, "repeated")
            return ReplyVerdict(could_not(reply, model_name), caught="repeated")
    return ReplyVerdict(reply)
