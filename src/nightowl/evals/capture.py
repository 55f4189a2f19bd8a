"""Turning a failure into a draft case, in the transaction that notices it.

Two ways in: the owner marks an agent message wrong and says what should have happened
(`mark_wrong`), or the server flags a failure itself (`flag_failure`, one call hooked where
each happens): the guard stopped a turn, tool calls failed three times in a row, the owner
approved a call the reviewer had blocked (a false positive), the owner denied a call, or the
owner cut into a running turn with a correction that says the agent misunderstood
(`says_misunderstood`).

A case keeps the conversation as the model saw it before the failing turn's first model call,
and every tool result recorded so far (they stand in for the tools on replay), all with the
owner's vault secrets redacted by the gate's own redaction (safety/redaction.py) — tool
output is redacted when it is recorded, but the owner's own words or a secret added to the
vault later may still carry one. Outside text keeps its trust, so a replay fences it as the
turn did.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from nightowl.evals.cases import Checker, RecordedResult, ToolPattern
from nightowl.harness.notes import NOTE_META
from nightowl.messages import Entry, ToolCall
from nightowl.safety.redaction import Redactor
from nightowl.safety.vault import open_sealed
from nightowl.store.conversations import find_conversation
from nightowl.store.errors import Invalid
from nightowl.store.evals import CaseInfo, add_case
from nightowl.store.questions import get_message
from nightowl.store.secrets import sealed_of
from nightowl.store.transcript import load_transcript_by_turn

log = logging.getLogger(__name__)

TOOL_ERRORS_IN_A_ROW = 3  # tool calls failing this often in a row make a tool error loop

# A correction "says the agent misunderstood" when the owner's message opens with one of
# these (after spaces and punctuation, any case): "no", "nope", "actually", "that's not",
# "that is not", "not what I", "wrong", "I didn't mean", "I meant". Opening words, not
# anywhere: "no rush, also check the dates" redirects without saying the agent erred, and
# is the price of a rule simple enough to state in one line.
_MISUNDERSTOOD = re.compile(
    r"^\W*(no\b|nope\b|actually\b|that'?s not\b|that is not\b|not what i\b|wrong\b"
    r"|i didn'?t mean\b|i did not mean\b|i meant\b)",
    re.IGNORECASE,
)


def says_misunderstood(text: str) -> bool:
    """Whether an owner's correction opens by saying the agent got it wrong."""
    return _MISUNDERSTOOD.match(text.replace("\u2019", "'")) is not None


def failing_in_a_row(turn_entries: list[Entry]) -> bool:
    """Whether a turn's last `TOOL_ERRORS_IN_A_ROW` tool results all failed: a tool error
    loop."""
    results = [e for e in turn_entries if e.kind == "tool_result"]
    tail = results[-TOOL_ERRORS_IN_A_ROW:]
    return len(tail) == TOOL_ERRORS_IN_A_ROW and all(e.is_error for e in tail)


def owner_redactor(session: Session, vault_key: bytes | None, owner_id: str) -> Redactor:
    """The redaction of the owner's vault secrets (none without a vault key)."""
    if vault_key is None:
        return Redactor({})
    return Redactor(open_sealed(vault_key, sealed_of(session, owner_id)))


@dataclass(frozen=True)
class Captured:
    """What a case keeps of a conversation: the history before the failing turn's first model
    call, the tool results recorded so far, and what the failing turn did."""

    history: list[Entry]
    tool_results: list[RecordedResult]
    turn_did: str

    def data(self, owner_words: str, failed_reply: str) -> dict[str, Any]:
        return {
            "history": [entry.to_dict() for entry in self.history],
            "tool_results": [result.to_dict() for result in self.tool_results],
            "owner_words": owner_words,
            "failed_reply": failed_reply or self.turn_did,
        }


def _clean(redactor: Redactor, value: Any) -> Any:
    """`value` with every secret in every string redacted."""
    if isinstance(value, str):
        return redactor.redact(value) if redactor else value
    if isinstance(value, dict):
        return {k: _clean(redactor, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(redactor, v) for v in value]
    return value


def capture(session: Session, conversation_id: str, turn_id: str, redactor: Redactor) -> Captured:
    """The conversation up to the failing turn's first model call, redacted."""
    rows = [
        (turn, Entry.from_dict(_clean(redactor, entry.to_dict())))
        for turn, entry in load_transcript_by_turn(session, conversation_id)
    ]
    # The turn's first call: its reply, or the note it was shown (a replay says its own).
    cut = next(
        (
            i
            for i, (turn, e) in enumerate(rows)
            if turn == turn_id and (e.kind == "assistant" or NOTE_META in e.meta)
        ),
        len(rows),
    )
    calls: dict[str, ToolCall] = {call.id: call for _, entry in rows for call in entry.tool_calls}
    results = [
        RecordedResult(
            tool=entry.tool_name,
            arguments=calls[entry.call_id].arguments if entry.call_id in calls else {},
            text=entry.text,
            is_error=entry.is_error,
            trust=entry.trust,
            meta={k: v for k, v in entry.meta.items() if k in ("loaded", "blocked", "outside")},
        )
        for _, entry in rows
        if entry.kind == "tool_result" and entry.tool_name not in ("send_to_user", "load_tools")
    ]
    did = [
        f"{call.name}({_brief(call.arguments)})"
        for turn, entry in rows[cut:]
        if turn == turn_id
        for call in entry.tool_calls
    ]
    return Captured([entry for _, entry in rows[:cut]], results, "; ".join(did)[:2000])


def _brief(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={str(v)[:80]!r}" for k, v in arguments.items())


def mark_wrong(
    session: Session,
    *,
    owner_id: str,
    conversation_id: str,
    message_id: str,
    expected: str,
    vault_key: bytes | None,
) -> CaseInfo:
    """The draft case made from an agent message the owner marked wrong, with what should
    have happened (`expected`, their words); marking it again finds the same case."""
    expected = expected.strip()
    if not expected:
        raise Invalid("say what should have happened (the case's rubric)")
    message = get_message(session, conversation_id, message_id)
    if message.role != "agent" or not message.turn_id:
        raise Invalid("only a message the agent sent can be marked wrong")
    redactor = owner_redactor(session, vault_key, owner_id)
    captured = capture(session, conversation_id, message.turn_id, redactor)
    body = _clean(redactor, message.body)
    checker = Checker(
        forbid_text=(re.escape(body[:120]),) if body.strip() else (),
        rubric=_clean(redactor, expected),
    )
    return add_case(
        session,
        owner_id=owner_id,
        source="marked",
        source_key=message_id,
        title=f"Wrong: {body[:80]}" if body else "A reply marked wrong",
        data=captured.data(_clean(redactor, expected), body),
        checker=checker.to_dict(),
        conversation_id=conversation_id,
        turn_id=message.turn_id,
        message_id=message_id,
    )


@dataclass(frozen=True)
class Flag:
    """A failure the server noticed: its source (evals/cases.py SOURCES), where, why (words
    for the owner), a key that makes it one case however often it is noticed, and the tool
    call concerned (an approval's)."""

    source: str
    conversation_id: str
    turn_id: str
    why: str
    key: str
    call: ToolCall | None = None


def _checker_for(flag: Flag) -> Checker:
    """A draft's first checker, which the owner edits: an approved block expects the call,
    a denied one forbids it, the rest ask a judge whether the turn avoided the failure."""
    if flag.source == "approved_block" and flag.call is not None:
        return Checker(expect_tools=(ToolPattern(flag.call.name),), rubric=flag.why)
    if flag.source == "denied_approval" and flag.call is not None:
        return Checker(forbid_tools=(ToolPattern(flag.call.name),), rubric=flag.why)
    return Checker(rubric=flag.why)


def flag_failure(session: Session, flag: Flag, vault_key: bytes | None) -> CaseInfo | None:
    """Keep a failure the server noticed as a draft case (once per `flag.key`), in a savepoint
    of the caller's transaction: a case that cannot be made (a vault key that no longer opens
    a secret, say) is logged and left out, never allowed to fail the caller's write (an
    owner's message, an answer, a step's result)."""
    try:
        with session.begin_nested():
            return _flag(session, flag, vault_key)
    except Exception:
        log.warning(
            "an eval case could not be kept",
            extra={"source": flag.source, "conversation_id": flag.conversation_id},
            exc_info=True,
        )
        return None


def _flag(session: Session, flag: Flag, vault_key: bytes | None) -> CaseInfo:
    owner_id = find_conversation(session, flag.conversation_id).owner_id
    redactor = owner_redactor(session, vault_key, owner_id)
    captured = capture(session, flag.conversation_id, flag.turn_id, redactor)
    why = _clean(redactor, flag.why)
    return add_case(
        session,
        owner_id=owner_id,
        source=flag.source,
        source_key=flag.key,
        title=f"{flag.source.replace('_', ' ')}: {why[:120]}",
        data=captured.data(why, ""),
        checker=_checker_for(flag).to_dict(),
        conversation_id=flag.conversation_id,
        turn_id=flag.turn_id,
    )
