"""A turn's timeline, for the owner who asks why the agent did something: what woke it, each
model call (tokens, cache hits, cost, time), each tool run (effect, outcome, time) and each
safety decision, in the order they happened — read from the store's own records, so it needs
no trace server. Message bodies and tool arguments are not in it (the conversation shows what
was said; a tool's arguments can carry outside text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.errors import NotFound
from nightowl.store.row_views import view_of
from nightowl.store.tables import AuditEvent, Message, ModelCall, ToolRun, Trigger, Turn

MAX_STEPS = 2000  # a turn that ran away still answers quickly
# What a model call was for, by its step: the agent's own calls count up from 0; the others
# are recorded under fixed negative steps (engine/gate.py REVIEW_STEP, memory/memory_pass.py
# MEMORY_STEP, tools/mcp/server_requests.py SAMPLING_STEP).
PURPOSES = {-1: "safety review", -2: "memory pass", -3: "connector sampling"}


@dataclass(frozen=True)
class TimelineStep:
    """One thing the turn did: a model call, a tool run or a safety decision."""

    kind: str  # model_call | tool_run | safety
    at: datetime
    duration_ms: float | None  # None: still running, or died while it ran
    name: str  # the model, the tool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timeline:
    """A turn from what woke it to its end."""

    turn_id: str
    conversation_id: str
    status: str
    activity: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    woken_by: list[dict[str, Any]]  # the triggers of its batch: source, received_at
    steps: list[TimelineStep]
    totals: dict[str, Any]


def _ms(start: datetime, end: datetime | None) -> float | None:
    return None if end is None else round((end - start).total_seconds() * 1000, 1)


def turn_timeline(session: Session, conversation_id: str, turn_id: str) -> Timeline:
    """The turn's timeline (NotFound when the conversation has no such turn)."""
    turn = session.get(Turn, turn_id)
    if turn is None or turn.conversation_id != conversation_id:
        raise NotFound(f"no turn {turn_id!r} in this conversation")
    steps = [_model_step(c) for c in _rows(session, ModelCall, turn_id, ModelCall.started_at)]
    steps += [_tool_step(r) for r in _rows(session, ToolRun, turn_id, ToolRun.started_at)]
    steps += [_safety_step(e) for e in _rows(session, AuditEvent, turn_id, AuditEvent.id)]
    steps.sort(key=lambda s: (s.at, s.kind != "model_call"))
    calls = [s for s in steps if s.kind == "model_call"]
    totals = {
        "model_calls": len(calls),
        "agent_model_calls": sum(s.detail["purpose"] == "agent" for s in calls),
        "tool_runs": sum(s.kind == "tool_run" for s in steps),
        "input_tokens": sum(s.detail["input_tokens"] for s in calls),
        "cache_read_tokens": sum(s.detail["cache_read_tokens"] for s in calls),
        "output_tokens": sum(s.detail["output_tokens"] for s in calls),
        "cost_usd": round(sum(s.detail["cost_usd"] or 0.0 for s in calls), 6),
        "duration_ms": _ms(turn.started_at, turn.finished_at) if turn.started_at else None,
    }
    return view_of(
        Timeline,
        turn,
        turn_id=turn.id,
        woken_by=_woken_by(session, turn),
        steps=steps,
        totals=totals,
    )


def _rows(session: Session, table: Any, turn_id: str, order: Any) -> list[Any]:
    return list(
        session.scalars(
            select(table).where(table.turn_id == turn_id).order_by(order).limit(MAX_STEPS)
        )
    )


def _model_step(call: ModelCall) -> TimelineStep:
    return TimelineStep(
        kind="model_call",
        at=call.started_at,
        duration_ms=_ms(call.started_at, call.finished_at),
        name=call.model,
        detail={
            "step": call.step,
            "purpose": "agent" if call.step >= 0 else PURPOSES.get(call.step, "other"),
            "input_tokens": call.input_tokens,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            "output_tokens": call.output_tokens,
            "cost_usd": call.cost_usd,
            "cache_break": call.cache_break,
            "error": call.error,
        },
    )


def _tool_step(run: ToolRun) -> TimelineStep:
    outcome = "died while running" if run.finished_at is None else "error" if run.is_error else "ok"
    return TimelineStep(
        kind="tool_run",
        at=run.started_at,
        duration_ms=_ms(run.started_at, run.finished_at),
        name=run.tool,
        detail={"effect": run.effect, "outcome": outcome, "call_id": run.call_id},
    )


def _safety_step(event: AuditEvent) -> TimelineStep:
    return TimelineStep(
        kind="safety",
        at=event.at,
        duration_ms=None,
        name=event.tool,
        detail={
            "event": event.kind,
            "decision": event.decision,
            "effect": event.effect,
            "reason": event.reason[:500],
        },
    )


def _woken_by(session: Session, turn: Turn) -> list[dict[str, Any]]:
    """The sources of the messages in the turn's batch (the owner's chat, a channel, a
    webhook, a routine, a helper's report), each once."""
    if turn.batch_first_seq is None or turn.batch_last_seq is None:
        return []
    rows = session.execute(
        select(Trigger.source, Trigger.received_at)
        .join(Message, Message.id == Trigger.message_id)
        .where(
            Message.conversation_id == turn.conversation_id,
            Message.seq >= turn.batch_first_seq,
            Message.seq <= turn.batch_last_seq,
        )
        .order_by(Trigger.received_at)
        .limit(50)
    ).all()
    return [{"source": source, "received_at": at} for source, at in rows]
