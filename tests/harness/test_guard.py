"""The runaway guard stops loops, long turns and overspending, with a reason for the user."""

from __future__ import annotations

from nightowl.harness.guard import GuardLimits, budget_stop, check_guard
from nightowl.messages import Spending, ToolCall

LIMITS = GuardLimits(
    max_steps=10,
    max_identical_calls=3,
    daily_token_budget=1000,
    conversation_budget_usd=5.0,
    routine_budget_usd=0.5,
)


def _call(seconds: int) -> ToolCall:
    return ToolCall(id=f"c{seconds}", name="wait", arguments={"seconds": seconds})


def test_identical_calls_in_a_row_trip_it() -> None:
    assert check_guard(LIMITS, 2, [_call(1), _call(1)]) is None
    reason = check_guard(LIMITS, 3, [_call(1), _call(1), _call(1)])
    assert reason is not None and "same arguments 3 times" in reason


def test_different_arguments_do_not() -> None:
    assert check_guard(LIMITS, 3, [_call(1), _call(2), _call(1)]) is None


def test_the_same_two_or_three_calls_over_and_over_trip_it() -> None:
    """A cycle (write a file, report it wrongly, write it again …) repeated 3 times in a row;
    a cycle seen twice, or one whose arguments change, goes on."""
    write = ToolCall("w", "write_file", {"path": "~/.t", "content": "t"})
    report = ToolCall("r", "report", {"text": "done", "files": ["t"]})
    twice = [write, report] * 2
    assert check_guard(LIMITS, 4, twice) is None
    reason = check_guard(LIMITS, 6, [_call(9), *twice, write, report])
    assert reason is not None and "same 2 calls (write_file, report)" in reason
    triple = [write, report, _call(5)] * 3
    found = check_guard(LIMITS, 9, triple)
    assert found is not None and "same 3 calls" in found
    moving = [write, report, write, ToolCall("r", "report", {"text": "other"}), write, report]
    assert check_guard(LIMITS, 6, moving) is None


def test_step_limit() -> None:
    steps = check_guard(LIMITS, 10, [])
    assert steps is not None and "10 steps" in steps


def test_budgets_of_tokens_of_the_conversation_and_of_the_routine() -> None:
    assert budget_stop(LIMITS, Spending(tokens=999, conversation_usd=4.99)) is None
    tokens = budget_stop(LIMITS, Spending(tokens=1000))
    assert tokens is not None and "1,000 tokens" in tokens
    money = budget_stop(LIMITS, Spending(conversation_usd=5.0))
    assert money is not None and "$5.00" in money and "NIGHTOWL_CONVERSATION_BUDGET_USD" in money
    assert budget_stop(LIMITS, Spending(routine_usd=0.49, routine_name="digest")) is None
    routine = budget_stop(LIMITS, Spending(routine_usd=0.5, routine_name="digest"))
    assert routine is not None and "routine 'digest'" in routine and "$0.50" in routine
