"""Durable timers: a delayed workflow that, when due, wakes its conversation with a note."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dbos import DBOS

from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.outages import outlast

TIMER_QUEUE = "nightowl-timers"
TimerWorkflow = Callable[[str, str, str], Awaitable[None]]


def timer_workflow_id(turn_id: str, call_id: str) -> str:
    """The id of the workflow a `set_timer` call starts, and of its `timers` row."""
    return f"timer-{turn_id}-{call_id}"


def build_timer_workflow(router: Router) -> TimerWorkflow:
    """Register the workflow a timer runs when it is due (its note goes through `router`)."""

    @DBOS.step(name="nightowl.fire_timer")
    async def fire(timer_id: str, conversation_id: str, note: str) -> None:
        incoming = IncomingMessage(
            source="timer",
            idempotency_key=timer_id,
            conversation_id=conversation_id,
            text=f"Timer due: {note}",
            trust="agent",
            priority=Priority.TIMER,
            role="notice",
        )
        await outlast(router.accept, incoming)  # once: keyed by the timer

    @DBOS.workflow(name="nightowl.timer")
    async def timer(timer_id: str, conversation_id: str, note: str) -> None:
        await fire(timer_id, conversation_id, note)

    return timer
