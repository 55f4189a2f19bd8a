"""The autonomy report (pure): what the agent did on its own, what it asked first and how the
owner answered, and what the models cost by what woke them — per day.

Inputs are plain records the store reads (`ActionEvent`, `Spend`); days are UTC dates.

- **Consequential actions** are the calls the safety review looks at (every write, send and
  spend, and shell commands: `safety/policy.needs_review`). One `done without asking` is such a
  call let through without a question to the owner (whether the tool then succeeded or not);
  a `held` one asked — an approval question, or a draft of a send waiting for Send — and its
  answer is `approved` (a draft sent), `denied` (a draft discarded) or `expired` (no answer
  within the window).
- **Median time to an answer**: from the question to the owner's approve or deny, over the
  answers given that day (an expired question has no answer time).
- **Spending by source**: a model call counts for what woke its turn — `direct` (the owner's
  own messages, from the app, the CLI or the API), `routines`, `webhooks`, `channels` (e-mail,
  Matrix, Slack, Telegram), `timers` (a reminder the agent set), `helpers` (a helper's own
  work, and the parent's turn that a helper's report woke), `background` (work the server does
  on its own: cache warming, the memory pass, compaction) — or `other`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from statistics import median
from typing import Any

SOURCES = (
    "direct",
    "routines",
    "webhooks",
    "channels",
    "timers",
    "helpers",
    "background",
    "other",
)
# What a trigger's source (the `triggers.source` that woke a turn) counts as.
_BY_TRIGGER = {
    "api": "direct",
    "routine": "routines",
    "watch": "routines",
    "webhook": "webhooks",
    "timer": "timers",
    "helper": "helpers",
}
CHANNEL_KINDS = frozenset({"email", "matrix", "slack", "telegram", "whatsapp", "discord"})
# The audit kinds the report reads, and what an answer to a held call is called here.
ACTION_KINDS = (
    "reviewed",
    "approval_requested",
    "approved",
    "denied",
    "timed_out",
    "sent",
    "discarded",
    "send_failed",
)
_ANSWERS = {"approved": "approved", "denied": "denied", "timed_out": "expired"}
# A send is a draft the owner answers (Send or Discard): held from its review on.
_DRAFT_ANSWERS = {"sent": "approved", "send_failed": "approved", "discarded": "denied"}


@dataclass(frozen=True)
class ActionEvent:
    """One audit-log event about a consequential call: `call` names the call (its turn and
    slot), `kind` one of ACTION_KINDS."""

    call: str
    kind: str
    at: datetime


@dataclass(frozen=True)
class Spend:
    """One model call: when, what woke it (see `source_of`), its tokens and cost (None when the
    price table has no price for the model)."""

    at: datetime
    source: str
    tokens: int
    cost_usd: float | None


def source_of(
    *,
    turn_id: str,
    step: int,
    helper: bool,
    routine: bool,
    trigger: str | None,
    background_steps: frozenset[int],
) -> str:
    """What a model call counts for: work the server does on its own first (warming,
    compaction, the memory pass's steps), then a helper's conversation, a routine's turn, and
    otherwise the trigger of the first message its turn took."""
    if turn_id == "warm" or turn_id.startswith("compaction:") or step in background_steps:
        return "background"
    if helper:
        return "helpers"
    if routine:
        return "routines"
    if trigger is None:
        return "other"
    if trigger in CHANNEL_KINDS:
        return "channels"
    return _BY_TRIGGER.get(trigger, "other")


@dataclass
class Money:
    """Tokens and dollars of one source on one day."""

    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def add(self, spend: Spend) -> None:
        self.tokens += spend.tokens
        if spend.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += spend.cost_usd

    def to_dict(self) -> dict[str, float | int]:
        return {
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unpriced_calls": self.unpriced_calls,
        }


@dataclass
class Period:
    """One day (or the whole report): actions, answers and spending."""

    without_asking: int = 0
    held: int = 0
    approved: int = 0
    denied: int = 0
    expired: int = 0
    answer_seconds: list[float] = field(default_factory=list)
    by_source: dict[str, Money] = field(default_factory=lambda: {s: Money() for s in SOURCES})

    def to_dict(self) -> dict[str, object]:
        tokens = sum(m.tokens for m in self.by_source.values())
        cost = sum(m.cost_usd for m in self.by_source.values())
        return {
            "actions": {
                "without_asking": self.without_asking,
                "held": self.held,
                "approved": self.approved,
                "denied": self.denied,
                "expired": self.expired,
            },
            "median_answer_s": (
                round(median(self.answer_seconds), 1) if self.answer_seconds else None
            ),
            "answers": len(self.answer_seconds),
            "tokens": tokens,
            "cost_usd": round(cost, 6),
            "by_source": {name: money.to_dict() for name, money in self.by_source.items()},
        }


def autonomy_report(
    events: list[ActionEvent], spends: list[Spend], first_day: date, days: int
) -> dict[str, Any]:
    """The report over `days` days from `first_day` (UTC): `days` (one entry per day, oldest
    first, days with nothing included) and `total`; what happened outside them is left out."""
    span = [first_day + timedelta(days=n) for n in range(days)]
    daily = {day: Period() for day in span}
    total = Period()

    def periods(at: datetime) -> list[Period]:
        day = daily.get(at.date())
        return [] if day is None else [day, total]

    by_call: dict[str, dict[str, datetime]] = defaultdict(dict)
    for event in events:
        by_call[event.call].setdefault(event.kind, event.at)
    for kinds in by_call.values():
        asked = kinds.get("approval_requested")
        answers = [(_ANSWERS[k], kinds[k]) for k in _ANSWERS if k in kinds]
        drafted = [(_DRAFT_ANSWERS[k], kinds[k]) for k in _DRAFT_ANSWERS if k in kinds]
        if drafted:
            answers = [a for a in answers if a[0] != "expired"] + drafted
        reviewed = kinds.get("reviewed")
        if asked is None and (drafted or "timed_out" in kinds) and reviewed is not None:
            asked = reviewed  # a draft: its review made it, and it waited from then on
        if asked is None and not answers and reviewed is not None:
            for period in periods(reviewed):
                period.without_asking += 1
        if asked is not None:
            for period in periods(asked):
                period.held += 1
        # An answer counts on its own day; its time only when the question is in the report.
        for word, answered in answers:
            for period in periods(answered):
                setattr(period, word, getattr(period, word) + 1)
                if word != "expired" and asked is not None:
                    period.answer_seconds.append(max(0.0, (answered - asked).total_seconds()))
    for spend in spends:
        for period in periods(spend.at):
            period.by_source[spend.source if spend.source in SOURCES else "other"].add(spend)
    return {
        "first_day": first_day.isoformat(),
        "days": [{"day": day.isoformat(), **daily[day].to_dict()} for day in span],
        "total": total.to_dict(),
    }
