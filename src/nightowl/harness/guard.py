"""The runaway guard: stop a turn that loops, runs too long, or spends too much."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from nightowl.harness.transcript import ToolCall


@dataclass(frozen=True)
class GuardLimits:
    """How far a turn may go before it is stopped."""

    max_steps: int = 40
    max_identical_calls: int = 4
    daily_token_budget: int = 2_000_000


def _fingerprint(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


def check_guard(
    limits: GuardLimits,
    steps_taken: int,
    calls_this_turn: Sequence[ToolCall],
    tokens_today: int,
) -> str | None:
    """Why the turn must stop now (a sentence for the user), or None to go on."""
    if steps_taken >= limits.max_steps:
        return (
            f"I stopped this task after {steps_taken} steps without finishing, "
            "to avoid running away. Tell me how you'd like me to continue."
        )
    if tokens_today >= limits.daily_token_budget:
        return (
            f"I stopped because this conversation used its daily budget of "
            f"{limits.daily_token_budget:,} tokens. It resets tomorrow, or raise the budget."
        )
    if len(calls_this_turn) >= limits.max_identical_calls:
        tail = calls_this_turn[-limits.max_identical_calls :]
        if len({_fingerprint(call) for call in tail}) == 1:
            return (
                f"I stopped because I called {tail[0].name} with the same arguments "
                f"{limits.max_identical_calls} times in a row, which looks like a loop. "
                "Tell me how you'd like me to proceed."
            )
    return None
