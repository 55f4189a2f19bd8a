"""The runaway guard: stop a turn that loops, runs too long, or spends too much."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from nightowl.messages import Spending, ToolCall


@dataclass(frozen=True)
class GuardLimits:
    """How far a turn may go before it is stopped."""

    max_steps: int = 40
    max_identical_calls: int = 4
    daily_token_budget: int = 2_000_000
    conversation_budget_usd: float = 20.0  # per conversation per day (UTC)
    routine_budget_usd: float = 2.0  # per routine per day (UTC)
    # per user per day (UTC), over all of their conversations: opening new ones is no way round
    user_budget_usd: float = 50.0
    user_token_budget: int = 20_000_000


def budget_stop(limits: GuardLimits, spent: Spending) -> str | None:
    """Why spending must stop for today (a sentence for the owner), or None."""
    if spent.routine_usd is not None and spent.routine_usd >= limits.routine_budget_usd:
        return (
            f"I stopped the routine '{spent.routine_name}': its turns spent "
            f"${spent.routine_usd:.2f} today, and its daily budget is "
            f"${limits.routine_budget_usd:.2f}. It runs again tomorrow, or raise "
            "NIGHTOWL_ROUTINE_BUDGET_USD."
        )
    if spent.conversation_usd >= limits.conversation_budget_usd:
        return (
            f"I stopped because this conversation spent ${spent.conversation_usd:.2f} on the "
            f"model today; its daily budget is ${limits.conversation_budget_usd:.2f}. It resets "
            "at midnight UTC, or raise NIGHTOWL_CONVERSATION_BUDGET_USD."
        )
    if spent.user_usd >= limits.user_budget_usd or spent.user_tokens >= limits.user_token_budget:
        return (
            f"I stopped because your conversations together used ${spent.user_usd:.2f} and "
            f"{spent.user_tokens:,} tokens of the model today; a user's daily budget is "
            f"${limits.user_budget_usd:.2f} and {limits.user_token_budget:,} tokens. It resets "
            "at midnight UTC, or the owner raises NIGHTOWL_USER_BUDGET_USD / "
            "NIGHTOWL_USER_TOKEN_BUDGET."
        )
    if spent.tokens >= limits.daily_token_budget:
        return (
            f"I stopped because this conversation used its daily budget of "
            f"{limits.daily_token_budget:,} tokens. It resets tomorrow, or raise the budget."
        )
    return None


def budget_skip(limits: GuardLimits, spent: Spending) -> str | None:
    """Why a routine's due time is skipped rather than run (its budget, its conversation's or
    its owner's is spent for today, UTC), or None: a turn started now would stop at once."""
    if spent.routine_usd is not None and spent.routine_usd >= limits.routine_budget_usd:
        return (
            f"budget: the routine spent ${spent.routine_usd:.2f} today of its "
            f"${limits.routine_budget_usd:.2f} (NIGHTOWL_ROUTINE_BUDGET_USD)"
        )
    if spent.conversation_usd >= limits.conversation_budget_usd:
        return (
            f"budget: its conversation spent ${spent.conversation_usd:.2f} today of its "
            f"${limits.conversation_budget_usd:.2f} (NIGHTOWL_CONVERSATION_BUDGET_USD)"
        )
    if spent.tokens >= limits.daily_token_budget:
        return (
            f"budget: its conversation used {spent.tokens:,} tokens today of its "
            f"{limits.daily_token_budget:,}"
        )
    if spent.user_usd >= limits.user_budget_usd or spent.user_tokens >= limits.user_token_budget:
        return (
            f"budget: the owner's conversations used ${spent.user_usd:.2f} and "
            f"{spent.user_tokens:,} tokens today of ${limits.user_budget_usd:.2f} and "
            f"{limits.user_token_budget:,} (NIGHTOWL_USER_BUDGET_USD / NIGHTOWL_USER_TOKEN_BUDGET)"
        )
    return None


# The longest cycle of calls the guard looks for (a repeated pair or triple of calls).
MAX_CYCLE = 3


def _fingerprint(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


def check_guard(
    limits: GuardLimits,
    steps_taken: int,
    calls_this_turn: Sequence[ToolCall],
) -> str | None:
    """Why the turn must stop now (a sentence for the user), or None to go on; budgets are
    `budget_stop`'s (they speak once a day, not once a turn)."""
    if steps_taken >= limits.max_steps:
        return (
            f"I stopped this task after {steps_taken} steps without finishing, "
            "to avoid running away. Tell me how you'd like me to continue."
        )
    if len(calls_this_turn) >= limits.max_identical_calls:
        tail = calls_this_turn[-limits.max_identical_calls :]
        if len({_fingerprint(call) for call in tail}) == 1:
            return (
                f"I stopped because I called {tail[0].name} with the same arguments "
                f"{limits.max_identical_calls} times in a row, which looks like a loop. "
                "Tell me how you'd like me to proceed."
            )
    cycle = repeated_cycle(calls_this_turn, limits.max_identical_calls)
    if cycle:
        names = ", ".join(call.name for call in cycle)
        return (
            f"I stopped because I made the same {len(cycle)} calls ({names}) with the same "
            f"arguments {limits.max_identical_calls} times over, which looks like a loop. "
            "Tell me how you'd like me to proceed."
        )
    return None


def repeated_cycle(
    calls: Sequence[ToolCall], times: int, longest: int = MAX_CYCLE
) -> Sequence[ToolCall]:
    """The calls of a cycle of 2 to `longest` calls that the newest calls repeat `times` times
    in a row with the same arguments (a small model writing a file, reporting it wrong and
    writing it again, 60 steps long); empty when there is none."""
    prints = [_fingerprint(call) for call in calls]
    for size in range(2, longest + 1):
        span = size * times
        if len(prints) < span or len(set(prints[-size:])) == 1:
            continue
        tail = prints[-span:]
        if all(tail[i] == tail[i % size] for i in range(span)):
            return calls[-size:]
    return ()
