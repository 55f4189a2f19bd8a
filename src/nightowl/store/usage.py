"""What the models cost: totals per day, per conversation and per routine, and the spending a
budget is checked against."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, case, func, select
from sqlalchemy.orm import Session

from nightowl.messages import Spending
from nightowl.store.tables import Conversation, Helper, ModelCall, Routine, Turn


@dataclass(frozen=True)
class UsageTotals:
    """Tokens and cost of a set of model calls."""

    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0  # calls of a model the price table has no price for
    meter_prompt_tokens: int = 0  # the prefix-cache meter's estimates (any model)
    meter_prefix_tokens: int = 0

    @property
    def cached_share(self) -> float:
        """The share of input tokens served from the provider's cache."""
        total = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return round(self.cache_read_tokens / total, 4) if total else 0.0

    @property
    def meter_share(self) -> float:
        """The share of prompt tokens a prefix-caching provider could serve from its cache."""
        total = self.meter_prompt_tokens
        return round(self.meter_prefix_tokens / total, 4) if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The totals with the cached share, for JSON."""
        return {
            **asdict(self),
            "cost_usd": round(self.cost_usd, 6),
            "cached_share": self.cached_share,
            "meter_cached_share": self.meter_share,
        }


def _sums() -> list[ColumnElement[Any]]:
    return [
        func.count(ModelCall.id),
        func.coalesce(func.sum(ModelCall.input_tokens), 0),
        func.coalesce(func.sum(ModelCall.cache_read_tokens), 0),
        func.coalesce(func.sum(ModelCall.cache_write_tokens), 0),
        func.coalesce(func.sum(ModelCall.output_tokens), 0),
        func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
        func.count(ModelCall.id) - func.count(ModelCall.cost_usd),
        func.coalesce(func.sum(ModelCall.meter_prompt_tokens), 0),
        func.coalesce(func.sum(ModelCall.meter_prefix_tokens), 0),
    ]


def _totals(row: Any) -> UsageTotals:
    calls, inp, read, write, out, cost, unpriced, metered, prefix = row
    return UsageTotals(
        int(calls),
        int(inp),
        int(read),
        int(write),
        int(out),
        float(cost),
        int(unpriced),
        int(metered),
        int(prefix),
    )


def _owned(query: Select[Any], owner_id: str, since: datetime) -> Select[Any]:
    return query.join(Conversation, Conversation.id == ModelCall.conversation_id).where(
        Conversation.owner_id == owner_id, ModelCall.started_at >= since
    )


def usage_report(session: Session, owner_id: str, since: datetime) -> dict[str, Any]:
    """The owner's model usage since `since`: in total, per day, per conversation, per routine."""
    total = _totals(session.execute(_owned(select(*_sums()), owner_id, since)).one())
    day = func.date(ModelCall.started_at)
    days = session.execute(
        _owned(select(day, *_sums()), owner_id, since).group_by(day).order_by(day)
    ).all()
    conversations = session.execute(
        _owned(select(Conversation.id, Conversation.title, *_sums()), owner_id, since)
        .where(Conversation.kind != "helper")
        .group_by(Conversation.id, Conversation.title)
        .order_by(func.coalesce(func.sum(ModelCall.cost_usd), 0.0).desc(), Conversation.id)
    ).all()
    routines = session.execute(
        _owned(select(Routine.id, Routine.name, *_sums()), owner_id, since)
        .join(Turn, Turn.id == ModelCall.turn_id)
        .join(Routine, Routine.id == Turn.routine_id)
        .group_by(Routine.id, Routine.name)
        .order_by(Routine.name)
    ).all()
    helpers = session.execute(
        _owned(
            select(Helper.id, Helper.name, Helper.parent_conversation_id, *_sums()),
            owner_id,
            since,
        )
        .join(Helper, Helper.conversation_id == Conversation.id)
        .group_by(Helper.id, Helper.name, Helper.parent_conversation_id)
        .order_by(Helper.id)
    ).all()
    return {
        "since": since.isoformat(),
        "total": total.to_dict(),
        "by_day": [{"day": str(row[0]), **_totals(row[1:]).to_dict()} for row in days],
        "by_conversation": [
            {"conversation_id": row[0], "title": row[1], **_totals(row[2:]).to_dict()}
            for row in conversations
        ],
        "by_routine": [
            {"routine_id": row[0], "name": row[1], **_totals(row[2:]).to_dict()} for row in routines
        ],
        "by_helper": [
            {
                "helper_id": row[0],
                "name": row[1],
                "conversation_id": row[2],
                **_totals(row[3:]).to_dict(),
            }
            for row in helpers
        ],
    }


def spent_since(
    session: Session,
    since: datetime,
    *,
    conversation_id: str | None = None,
    routine_id: str | None = None,
) -> float:
    """USD spent on model calls since `since`, by one conversation or by one routine's turns."""
    query = select(func.coalesce(func.sum(ModelCall.cost_usd), 0.0)).where(
        ModelCall.started_at >= since
    )
    if conversation_id is not None:
        query = query.where(ModelCall.conversation_id == conversation_id)
    if routine_id is not None:
        query = query.join(Turn, Turn.id == ModelCall.turn_id).where(Turn.routine_id == routine_id)
    return float(session.scalar(query) or 0.0)


def spending_today(session: Session, turn_id: str, midnight: datetime) -> Spending:
    """What the turn's conversation, and the routine that woke it, spent since midnight."""
    turn = session.get(Turn, turn_id)
    if turn is None:
        return Spending()
    return _spending(session, turn.conversation_id, turn.routine_id, midnight)


def routine_spending_today(
    session: Session, routine_id: str, conversation_id: str, midnight: datetime
) -> Spending:
    """What a routine, its conversation and its owner spent since midnight (before a firing
    starts a turn)."""
    return _spending(session, conversation_id, routine_id, midnight)


def _spending(
    session: Session, conversation_id: str, routine_id: str | None, midnight: datetime
) -> Spending:
    routine_usd, routine_name = None, ""
    if routine_id is not None:
        routine_usd = spent_since(session, midnight, routine_id=routine_id)
        routine = session.get(Routine, routine_id)
        routine_name = routine.name if routine is not None else routine_id
    # The conversation's tokens and dollars, and those of every conversation of its owner (a
    # member cannot spend without bound by opening new ones), in one pass over today's calls:
    # every model call checks them.
    tokens, dollars, user_tokens, user_dollars = session.execute(
        _TODAY, {"conversation_id": conversation_id, "midnight": midnight}
    ).one()
    return Spending(
        tokens=int(tokens or 0),
        conversation_usd=float(dollars or 0.0),
        routine_usd=routine_usd,
        routine_name=routine_name,
        user_tokens=int(user_tokens or 0),
        user_usd=float(user_dollars or 0.0),
    )


_TOTALS = (
    func.coalesce(
        func.sum(
            ModelCall.input_tokens
            + ModelCall.cache_read_tokens
            + ModelCall.cache_write_tokens
            + ModelCall.output_tokens
        ),
        0,
    ),
    func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
)


_TOKENS = (
    ModelCall.input_tokens
    + ModelCall.cache_read_tokens
    + ModelCall.cache_write_tokens
    + ModelCall.output_tokens
)
_MINE = ModelCall.conversation_id == bindparam("conversation_id")
_OWNER = (
    select(Conversation.owner_id)
    .where(Conversation.id == bindparam("conversation_id"))
    .scalar_subquery()
)
_TODAY = (
    select(
        func.coalesce(func.sum(case((_MINE, _TOKENS), else_=0)), 0),
        func.coalesce(func.sum(case((_MINE, ModelCall.cost_usd), else_=0.0)), 0.0),
        func.coalesce(func.sum(_TOKENS), 0),
        func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
    )
    .join(Conversation, Conversation.id == ModelCall.conversation_id)
    .where(Conversation.owner_id == _OWNER, ModelCall.started_at >= bindparam("midnight"))
)
