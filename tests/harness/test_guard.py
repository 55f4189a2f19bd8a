"""The runaway guard stops loops, long turns and overspending, with a reason for the user."""

from __future__ import annotations

from nightowl.harness.guard import GuardLimits, check_guard
from nightowl.harness.transcript import ToolCall

LIMITS = GuardLimits(max_steps=10, max_identical_calls=3, daily_token_budget=1000)


def _call(seconds: int) -> ToolCall:
    return ToolCall(id=f"c{seconds}", name="wait", arguments={"seconds": seconds})


def test_identical_calls_in_a_row_trip_it() -> None:
    assert check_guard(LIMITS, 2, [_call(1), _call(1)], 0) is None
    reason = check_guard(LIMITS, 3, [_call(1), _call(1), _call(1)], 0)
    assert reason is not None and "same arguments 3 times" in reason


def test_different_arguments_do_not() -> None:
    assert check_guard(LIMITS, 3, [_call(1), _call(2), _call(1)], 0) is None


def test_step_limit_and_budget() -> None:
    steps = check_guard(LIMITS, 10, [], 0)
    assert steps is not None and "10 steps" in steps
    budget = check_guard(LIMITS, 1, [], 1000)
    assert budget is not None and "budget" in budget
