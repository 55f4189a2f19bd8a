"""The memory pass after a turn: show the model the profile facts (numbered) and the turn, plan
its operations on a copy, consolidate when the plan is over the bounds, then write the facts,
the consolidations and the turn's work-log entry in one transaction (once per turn)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from nightowl.harness.notes import NOTE_META
from nightowl.memory.facts import (
    ProfileFull,
    Source,
    add_fact,
    list_facts,
    remove_fact,
    replace_fact,
)
from nightowl.memory.facts import mark_used as mark_facts_used
from nightowl.memory.pass_prompt import (
    TurnMessage,
    consolidation_request,
    pass_request,
    read_operations,
)
from nightowl.memory.plan import (
    TRUST_RANK,
    Item,
    Operations,
    apply_operations,
    drop_least_used,
    fits,
)
from nightowl.memory.worklog import write_entry
from nightowl.messages import Entry, ModelReply, ModelRequest, Usage
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.memory.passes import (
    Consolidation,
    PassRecord,
    pass_recorded,
    record_consolidation,
    record_pass,
    user_messages_of_turn,
)
from nightowl.store.memory_versions import Author
from nightowl.store.outbox import deliver_to_user
from nightowl.store.tables import utcnow
from nightowl.store.transcript import load_turn_entries

log = logging.getLogger(__name__)

MEMORY_STEP = -2  # the model_calls step of a memory pass's calls (a review's is -1)


@dataclass
class PassInput:
    """What the pass is shown: numbered facts, the turn's messages and its transcript."""

    items: list[Item]
    messages: list[TurnMessage]
    message_ids: dict[str, str]
    entries: list[Entry]
    done: bool = False

    @property
    def tainted(self) -> bool:
        """Whether the turn read outside text: an untrusted message or tool result, or a
        model call whose context held some (earlier in the conversation, or shown by memory:
        the reply records it, see memory/render.py `seen_outside`)."""
        return any(m.trust == "untrusted" for m in self.messages) or any(
            e.trust == "untrusted" or e.meta.get("tainted") or e.meta.get("outside")
            for e in self.entries
        )

    @property
    def trust_of(self) -> dict[str, str]:
        """Each message reference's trust, as a source of what the pass writes: in a turn
        that read outside text, untrusted whatever it cites (the pass model read that text
        too, so a fact citing the owner's message may still carry its words)."""
        if self.tainted:
            return {m.ref: "untrusted" for m in self.messages}
        return {m.ref: m.trust for m in self.messages}

    @property
    def least_trust(self) -> str:
        """The trust of the turn's least trusted content: of what it took, and untrusted
        when it read outside text. The work-log entry and uncited facts carry it."""
        levels = [m.trust for m in self.messages] + (["untrusted"] if self.tainted else [])
        return min(levels or ["owner"], key=lambda t: TRUST_RANK.get(t, 0))


@dataclass
class PassResult:
    """What the pass did."""

    added: int = 0
    replaced: int = 0
    removed: int = 0
    rejected: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    consolidations: list[dict[str, Any]] = field(default_factory=list)
    # Changes to the owner's own facts the pass proposed but did not make (a turn that read
    # outside text, or a source that is not the owner): the owner decides.
    suggested: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "added": self.added,
            "replaced": self.replaced,
            "removed": self.removed,
            "rejected": self.rejected,
            "ignored": self.ignored,
            "suggested": self.suggested,
            "consolidations": len(self.consolidations),
        }


def read_pass_input(session: Session, turn_id: str, user_id: str) -> PassInput:
    """The facts the pass is shown (numbered 1…) and what the turn took and did."""
    done = pass_recorded(session, turn_id)
    items = [
        Item(
            n,
            f.text,
            f.trust,
            f.id,
            None,
            f.use_count,
            (f.last_used_at or f.created_at).timestamp(),
        )
        for n, f in enumerate(list_facts(session, user_id), start=1)
    ]
    rows = user_messages_of_turn(session, turn_id)
    messages = [TurnMessage(f"m{n}", r.trust, r.body) for n, r in enumerate(rows, start=1)]
    entries = load_turn_entries(session, turn_id)
    refs = {f"m{n}": r.id for n, r in enumerate(rows, start=1)}
    # What the turn did, without the notes it was shown (memory's own recall among them).
    done_entries = [e for e in entries if e.kind != "user" and NOTE_META not in e.meta]
    return PassInput(items, messages, refs, done_entries, done)


def log_entry(given: PassInput, written: str) -> tuple[str, str]:
    """The turn's work-log entry and its trust.

    A turn asked by the owner that read outside text is logged from what it was asked and the
    tools it used, never from what the model wrote (the pass's summary, or its words to the
    owner), which may carry that text on: so the entry is as trusted as the ask. Logging the
    model's words as untrusted instead would taint every later turn shown the entry, whose own
    entry would be untrusted in turn: one web page would taint the owner's memory for good.
    """
    quoted = [m.trust for m in given.messages]
    asked = min(quoted or ["owner"], key=lambda t: TRUST_RANK.get(t, 0))
    if given.tainted and asked != "untrusted":
        return fallback_log(given, tell=False), asked
    return written or fallback_log(given), given.least_trust


def fallback_log(given: PassInput, tell: bool = True) -> str:
    """A work-log entry made from the turn itself, for a pass that wrote none (`tell`: with
    the last thing the agent told the owner)."""
    asked = " ".join(given.messages[0].text.split())[:160] if given.messages else "(no message)"
    tools = sorted({c.name for e in given.entries for c in e.tool_calls} - {"send_to_user"})
    told = [
        str(c.arguments.get("text", ""))
        for e in given.entries
        for c in e.tool_calls
        if c.name == "send_to_user"
    ]
    parts = [_sentence(f"Asked: {asked}")]
    if tools:
        parts.append(f"Used: {', '.join(tools)}.")
    said = " ".join(told[-1].split())[:160] if told else ""
    if tell:
        parts.append(_sentence(f"Told the owner: {said}") if said else "Sent nothing.")
    return " ".join(parts)


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


def _consolidation(
    method: str, removed: list[Item], added: list[Item], detail: str
) -> dict[str, Any]:
    return {
        "method": method,
        "removed": [i.text for i in removed],
        "added": [i.text for i in added],
        "detail": detail,
    }


Complete = Callable[[ModelRequest], Awaitable[ModelReply]]


async def plan_pass(
    complete: Complete, given: PassInput, today: str
) -> tuple[list[Item], Operations, PassResult, list[ModelReply]]:
    """Ask the model (`complete`: a model call, recorded by the caller) for the pass's
    operations; consolidate while the plan is over bounds."""
    now = utcnow().timestamp()
    replies = [await complete(pass_request(given.items, given.messages, given.entries, today))]
    ops = read_operations(replies[0])
    outcome = apply_operations(given.items, ops, given.trust_of, given.least_trust, now)
    result = PassResult(ignored=list(outcome.ignored))
    items = outcome.items
    if not fits(items):
        replies.append(await complete(consolidation_request(items)))
        merge = read_operations(replies[-1])
        touched = [
            i for i in items if i.number in set(merge.remove) | {r[0] for r in merge.replace}
        ]
        trust = min([i.trust for i in touched] or ["owner"], key=lambda t: TRUST_RANK.get(t, 0))
        merged = apply_operations(items, merge, {}, trust, now)
        result.ignored += merged.ignored
        before = {i.number: i for i in items}
        after = {i.number: i for i in merged.items}
        gone = [i for n, i in before.items() if n not in after]
        came = [i for n, i in after.items() if n not in before or before[n].text != i.text]
        if gone or came:
            detail = f"the model consolidated {len(items)} facts into {len(merged.items)}"
            result.consolidations.append(_consolidation("model", gone, came, detail))
        items = merged.items
    if not fits(items):
        kept, dropped = drop_least_used(items)
        new = sum(1 for i in dropped if i.fact_id is None)
        detail = (
            f"dropped {len(dropped)} least-used facts ({new} of them new this turn) to stay "
            "within 100 facts and 4,000 characters"
        )
        result.consolidations.append(_consolidation("least_used", dropped, [], detail))
        items = kept
    return items, ops, result, replies


def suggestion_notice(suggested: list[str]) -> str:
    """The owner's notice of changes to their facts that wait for them."""
    lines = "\n".join(f"- {s}" for s in suggested)
    return (
        "Memory kept what you told me. From text that did not come from you, I would have "
        f"changed your own facts as follows:\n{lines}\nIf one is right, change the fact "
        "yourself (the Memory page, or `nightowl memory facts edit ID TEXT`)."
    )


def _pass_trust(given: PassInput) -> str:
    return "untrusted" if given.tainted else "owner"


def _owners_fact_kept(given: PassInput, old: Item, new: Item | None, result: PassResult) -> bool:
    """Whether a fact the owner stated stays as it is although the pass would remove it
    (`new` None) or rewrite it: a pass of a turn that read outside text, or a rewrite from a
    source that is not the owner, never replaces the owner's word; the proposal is kept in
    the pass's record as a suggestion for the owner (`suggested`)."""
    if old.trust != "owner":
        return False
    owners_only = not given.tainted and all(m.trust == "owner" for m in given.messages)
    if new is not None and new.trust == "owner" and owners_only:
        return False
    if new is None and owners_only:
        return False
    proposal = f"remove {old.text!r}" if new is None else f"change {old.text!r} to {new.text!r}"
    result.suggested.append(proposal)
    return True


def write_pass(
    session: Session,
    given: PassInput,
    planned: list[Item],
    ops: Operations,
    result: PassResult,
    *,
    turn_id: str,
    conversation_id: str,
    user_id: str,
    model_name: str,
    calls: list[Usage],
) -> bool:
    """Write the planned profile, the consolidations, the work-log entry and the pass record
    (its model calls are recorded as they happen, by the caller's `complete`); False when
    this turn's pass was written already."""
    if pass_recorded(session, turn_id):
        return False
    shown = {i.number: i for i in given.items}
    final = {i.number: i for i in planned}
    pass_author = Author("memory_pass", turn_id, conversation_id, trust=_pass_trust(given))
    for number, item in shown.items():
        if number not in final and item.fact_id is not None:
            if _owners_fact_kept(given, item, None, result):
                continue
            try:
                remove_fact(session, user_id, item.fact_id, by=pass_author)
                result.removed += 1
            except NotFound:
                pass  # deleted meanwhile (say, by the owner)

    def source(item: Item) -> Source:
        message = given.message_ids.get(item.message_id or "")
        return Source(item.trust, conversation_id, message, turn_id)

    def author(item: Item) -> Author:
        found = source(item)
        return Author("memory_pass", turn_id, conversation_id, found.message_id, found.trust)

    used = []
    # Shrinking rewrites first, then growing ones, then new facts: every step stays in bounds.
    order = sorted(
        planned,
        key=lambda i: (
            i.number not in shown,
            len(i.text) - len(shown[i.number].text) if i.number in shown else 0,
        ),
    )
    for item in order:
        old = shown.get(item.number)
        try:
            if old is None:
                add_fact(session, user_id, item.text, source(item), by=author(item))
                result.added += 1
                continue
            if (item.text, item.trust) != (old.text, old.trust) and item.fact_id:
                if _owners_fact_kept(given, old, item, result):
                    continue
                replace_fact(
                    session, user_id, item.fact_id, item.text, source(item), by=author(item)
                )
                result.replaced += 1
            if item.use_count > old.use_count and item.fact_id:
                used.append(item.fact_id)
        except ProfileFull:
            # Changed since the pass was shown the profile (say, the owner added a fact):
            # the new text stays out, and the record says so.
            result.rejected.append(item.text)
        except NotFound:
            result.ignored.append(f"fact {item.number} was deleted meanwhile")
    mark_facts_used(session, user_id, used)
    if result.suggested:
        deliver_to_user(
            session,
            conversation_id,
            key=f"memory-suggestion:{turn_id}",
            body=suggestion_notice(result.suggested),
            turn_id=turn_id,
            role="notice",
        )
    if result.rejected:
        result.consolidations.append(
            _consolidation("rejected", [], [], "no room: " + "; ".join(result.rejected)[:2000])
        )
    for found in result.consolidations:
        kept = Consolidation(found["method"], found["removed"], found["added"], found["detail"])
        record_consolidation(session, user_id, turn_id, kept)
    summary, trust = log_entry(given, ops.log)
    write_entry(session, user_id, summary, conversation_id, turn_id, trust=trust)
    record_pass(
        session,
        PassRecord(
            turn_id,
            user_id,
            conversation_id,
            model_name,
            sum(u.input_tokens for u in calls),
            sum(u.output_tokens for u in calls),
            result.to_dict(),
        ),
    )
    return True


async def run_memory_pass(
    database: Database,
    model_name: str,
    complete: Complete,
    turn_id: str,
    conversation_id: str,
    user_id: str,
    use_model: bool = True,
) -> dict[str, Any]:
    """The whole pass for one turn (safe to run twice: the second run writes nothing).
    `complete` calls the model and records the call (they count toward usage and budgets
    like the turn's own). Without `use_model` (a turn stopped by a budget or the guard) only
    the work-log entry is written, made from the turn itself."""

    def read() -> PassInput:
        with database.read() as session:
            return read_pass_input(session, turn_id, user_id)

    given = await asyncio.to_thread(read)
    if given.done or not given.messages:
        return {"skipped": True}
    if use_model:
        planned, ops, result, replies = await plan_pass(
            complete, given, utcnow().strftime("%Y-%m-%d")
        )
    else:
        planned, ops, result, replies = list(given.items), Operations(), PassResult(), []

    def write() -> bool:
        with database.write() as session:
            return write_pass(
                session,
                given,
                planned,
                ops,
                result,
                turn_id=turn_id,
                conversation_id=conversation_id,
                user_id=user_id,
                model_name=model_name,
                calls=[r.usage for r in replies],
            )

    wrote = await asyncio.to_thread(write)
    log.info("memory pass", extra={"turn_id": turn_id, "outcome": result.to_dict()})
    return {"skipped": not wrote, **result.to_dict()}
