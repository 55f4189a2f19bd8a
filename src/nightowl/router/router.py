"""The single entry point of every trigger: dedupe, store, wake the conversation's queue."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nightowl.evals.capture import Flag, flag_failure, says_misunderstood
from nightowl.router.group_commit import GroupCommit
from nightowl.router.priority import AT_ONCE, Priority
from nightowl.store.conversations import (
    MessageInfo,
    NewMessage,
    append_to_conversations,
    conversation_exists,
    find_by_client_id,
)
from nightowl.store.database import Database
from nightowl.store.errors import Conflict, NotFound, StoreError
from nightowl.store.ids import new_id
from nightowl.store.questions import Answered, answer_question
from nightowl.store.tables import utcnow
from nightowl.store.triggers import (
    NewTrigger,
    claim_trigger_keys,
    message_of_trigger,
    messages_of_triggers,
)
from nightowl.store.turns import TurnInfo, mark_preempted_many, queue_turns, running_turn_ids
from nightowl.tracing.spans import Traces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingMessage:
    """A trigger that carries a message for a conversation."""

    source: str
    idempotency_key: str
    conversation_id: str
    text: str
    trust: str
    priority: Priority
    author_id: str | None = None
    client_id: str | None = None
    role: str = "user"  # "notice" for the runtime's own wake-ups (timers)


class AnswerWaker(Protocol):
    """Wakes the turn that waits on an answered question (the engine implements it)."""

    def deliver_answer(self, turn_id: str, question_id: str) -> None:
        """The question's answer is stored; resume the turn."""
        ...


class HelperStopper(Protocol):
    """Stops helper runs (the engine implements it)."""

    def stop_now(self, run_ids: list[str]) -> None:
        """Cancel the runs, clean up, tell their parents."""
        ...


@dataclass(frozen=True)
class Accepted:
    """What became of a trigger: its stored message, and whether it had been seen before."""

    message: MessageInfo
    duplicate: bool


class ConversationQueue(Protocol):
    """Runs a conversation's turns one at a time (the engine implements it)."""

    def wake(self, turn: TurnInfo, delay_s: float = 0.0) -> None:
        """Make sure this queued turn will run, not before `delay_s` seconds from now."""

    def preempt(self, turn_ids: list[str]) -> None:
        """Stop these running turns at once (the owner cut in)."""


@dataclass
class _Effects:
    """What to do once a batch has committed: log, preempt, wake."""

    logs: list[tuple[IncomingMessage, MessageInfo, str]] = field(default_factory=list)
    preempt: list[str] = field(default_factory=list)
    wake: list[tuple[TurnInfo, bool]] = field(default_factory=list)


class Router:
    """Turns triggers into stored messages and queued turns, each exactly once.

    Concurrent triggers are written together (group commit): one transaction per batch, one
    sequence bump and one notification per conversation, one turn lookup per conversation.
    """

    def __init__(
        self,
        database: Database,
        queue: ConversationQueue,
        batch_window_s: float = 0.0,
        helpers: HelperStopper | None = None,
        answers: AnswerWaker | None = None,
        traces: Traces | None = None,
        vault_key: bytes | None = None,
    ) -> None:
        self._database = database
        self._traces = traces or Traces()  # a span per trigger: the decision it got
        self._vault_key = vault_key  # redacts the owner's secrets from eval cases it flags
        self._answers = answers
        self._queue = queue
        self._helpers = helpers
        self._batch_window_s = batch_window_s
        self._batches: GroupCommit[IncomingMessage, Accepted] = GroupCommit(self._accept_batch)

    def stop_helpers(self, run_ids: list[str]) -> None:
        """The owner stops helpers (from the API): cancelled at once, cleaned up, and their
        parent conversations told. Blocking."""
        if self._helpers is not None and run_ids:
            self._helpers.stop_now(run_ids)

    def answer(
        self,
        conversation_id: str,
        question_id: str,
        answer: dict[str, Any],
        client_id: str | None,
        author_id: str,
        *,
        server_key: str | None = None,
    ) -> Answered:
        """Store the owner's answer to a question once, keyed by the client's id or (for a
        channel's event) by the server's key: a repeated key returns the first, and the turn
        that asked is resumed (again on a repeat: the first wake-up may have been lost).
        Conflict when the question is closed or answered, or the key was used otherwise."""
        with self._database.write() as session:
            answered = answer_question(
                session,
                conversation_id,
                question_id,
                answer=answer,
                client_id=client_id,
                server_key=server_key,
                author_id=author_id,
            )
        if self._answers is not None:
            # Sent on a repeat too (idempotent): the first may have died before its wake-up.
            try:
                self._answers.deliver_answer(answered.turn_id, question_id)
            except Exception:
                if not answered.duplicate:
                    raise
                log.info("no turn to wake for a repeated answer", extra={"message_id": question_id})
        return answered

    def accept(self, incoming: IncomingMessage) -> Accepted:
        """Store the message once (a repeated key returns the original) and wake the queue."""
        return self._batches.submit(incoming)

    def accept_together(self, batch: Sequence[IncomingMessage]) -> list[Accepted]:
        """Store the messages in one transaction, then wake the queue: a turn that wakes for
        them sees them all (a routine's notice and what its watch saw)."""
        outcomes = self._accept_batch(batch)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [o for o in outcomes if not isinstance(o, BaseException)]

    def _accept_batch(self, batch: Sequence[IncomingMessage]) -> list[Accepted | BaseException]:
        effects = _Effects()
        try:
            outcomes = self._write_batch(batch, effects)
        except (IntegrityError, StoreError):
            # Something in the batch breaks a rule (an unknown conversation, a client id used
            # under another key): take the triggers one by one, so only that one fails.
            effects = _Effects()
            outcomes = []
            for incoming in batch:
                try:
                    outcomes.append(self._write_batch([incoming], effects)[0])
                except (IntegrityError, StoreError) as error:
                    outcomes.append(self._already_seen(incoming, error))
        self._apply(effects)
        return outcomes

    def _write_batch(
        self, batch: Sequence[IncomingMessage], effects: _Effects
    ) -> list[Accepted | BaseException]:
        new_keys: dict[tuple[str, str], str] = {}  # trigger key -> its message id
        for incoming in batch:
            new_keys.setdefault((incoming.source, incoming.idempotency_key), new_id("msg"))
        stored: dict[tuple[str, str], MessageInfo] = {}
        staged = _Effects()
        with self._database.write() as session:
            now = utcnow()
            first_of_key: dict[tuple[str, str], IncomingMessage] = {}
            for incoming in batch:
                first_of_key.setdefault((incoming.source, incoming.idempotency_key), incoming)
            # The trigger rows go in first: a key seen before inserts nothing.
            claimed = claim_trigger_keys(
                session,
                [
                    NewTrigger(source, key, incoming.conversation_id, new_keys[(source, key)])
                    for (source, key), incoming in first_of_key.items()
                ],
                now,
            )
            # The new triggers' messages, per conversation in arrival order, written together.
            fresh = [first_of_key[key] for key in first_of_key if key in claimed]
            by_conversation: dict[str, list[IncomingMessage]] = {}
            for incoming in fresh:
                by_conversation.setdefault(incoming.conversation_id, []).append(incoming)
            written = append_to_conversations(
                session,
                {
                    conversation_id: [
                        NewMessage(
                            role=incoming.role,
                            body=incoming.text,
                            trust=incoming.trust,
                            author_id=incoming.author_id,
                            client_id=incoming.client_id,
                            message_id=new_keys[(incoming.source, incoming.idempotency_key)],
                        )
                        for incoming in arrivals
                    ]
                    for conversation_id, arrivals in by_conversation.items()
                },
            )
            for conversation_id, arrivals in by_conversation.items():
                for incoming, message in zip(arrivals, written[conversation_id], strict=True):
                    stored[(incoming.source, incoming.idempotency_key)] = message
            # Each level of urgency finds (or makes) its turn, most urgent first.
            priorities: dict[str, set[int]] = {
                c: {i.priority for i in a} for c, a in by_conversation.items()
            }
            turns = queue_turns(session, priorities)
            for (_, priority), (turn, created) in turns.items():
                if created:
                    staged.wake.append((turn, priority in AT_ONCE))
            for incoming in fresh:
                turn, _ = turns[(incoming.conversation_id, incoming.priority)]
                message = stored[(incoming.source, incoming.idempotency_key)]
                staged.logs.append((incoming, message, turn.id))
            urgent = [c for c, levels in priorities.items() if Priority.OWNER_DIRECT in levels]
            for conversation_id in urgent:
                running = running_turn_ids(session, conversation_id)
                staged.preempt.extend(running)
                self._flag_misunderstood(session, running, by_conversation[conversation_id])
            # A key seen before this batch answers with its original message (committed
            # by now: a conflicting insert waits for the other transaction to end).
            seen = messages_of_triggers(session, [k for k in first_of_key if k not in claimed])
        outcomes: list[Accepted | BaseException] = []
        for incoming in batch:
            key = (incoming.source, incoming.idempotency_key)
            if key in stored:
                outcomes.append(Accepted(stored[key], duplicate=first_of_key[key] is not incoming))
            elif key in seen:
                outcomes.append(Accepted(seen[key], duplicate=True))
            else:
                outcomes.append(RuntimeError(f"trigger {key[1]!r} has no message"))
        effects.logs.extend(staged.logs)
        effects.preempt.extend(staged.preempt)
        effects.wake.extend(staged.wake)
        return outcomes

    def _flag_misunderstood(
        self, session: Session, running: list[str], arrivals: list[IncomingMessage]
    ) -> None:
        """A correction that cuts in saying the agent got it wrong makes a draft eval case
        of the turn it stops (evals/capture.py says which words count)."""
        for turn_id in running:
            for incoming in arrivals:
                if incoming.priority == Priority.OWNER_DIRECT and says_misunderstood(incoming.text):
                    flag = Flag(
                        "misunderstood",
                        incoming.conversation_id,
                        turn_id,
                        incoming.text,
                        f"{turn_id}:{incoming.source}:{incoming.idempotency_key}",
                    )
                    flag_failure(session, flag, self._vault_key)

    def _already_seen(
        self, incoming: IncomingMessage, error: BaseException | None
    ) -> Accepted | BaseException:
        with self._database.read() as session:
            seen = message_of_trigger(session, incoming.source, incoming.idempotency_key)
            exists = conversation_exists(session, incoming.conversation_id)
            taken = (
                find_by_client_id(session, incoming.conversation_id, incoming.client_id)
                if exists and incoming.client_id is not None
                else None
            )
        if seen is not None:
            return Accepted(seen, duplicate=True)
        if not exists:  # the trigger's row refers to it, so the store says "foreign key"
            return NotFound(f"no conversation {incoming.conversation_id!r}")
        if taken is not None:  # e.g. an answer sent with the same id
            return Conflict(
                f"client_id {incoming.client_id!r} was already used in this conversation for "
                f"another message ({taken.id}); a new message needs a new client_id",
                code="client_id_reused",
            )
        return error or RuntimeError(f"trigger {incoming.idempotency_key!r} has no message")

    def _apply(self, effects: _Effects) -> None:
        if effects.preempt:
            # The owner's direct message is a correction: the running turn stops now and the
            # next one starts with the message and a record of what was cut off. Marked in
            # the store first: a turn on another worker notices at its next step.
            stopping = list(dict.fromkeys(effects.preempt))
            with self._database.write() as session:
                mark_preempted_many(session, stopping)
            self._queue.preempt(stopping)
        due = {turn.id: (turn, urgent) for turn, urgent in effects.wake}
        for incoming, message, turn_id in effects.logs:
            log.info(
                "trigger accepted",
                extra={
                    "conversation_id": incoming.conversation_id,
                    "turn_id": turn_id,
                    "source": incoming.source,
                    "seq": message.seq,
                },
            )
            waking = due.pop(turn_id, None)
            with self._traces.routed(
                source=incoming.source,
                conversation_id=incoming.conversation_id,
                message_id=message.id,
                turn_id=turn_id,
                priority=int(incoming.priority),
                new_turn=waking is not None,
            ):
                if waking is not None:  # woken in its first trigger's trace
                    self._wake(*waking)
        for turn, urgent in due.values():
            self._wake(turn, urgent)

    def _wake(self, turn: TurnInfo, urgent: bool) -> None:
        # The owner's direct message and a helper's report start at once; anything else
        # waits a moment so that a burst (a group thread, a webhook storm) is answered by
        # one turn.
        self._queue.wake(turn, 0.0 if urgent else self._batch_window_s)
