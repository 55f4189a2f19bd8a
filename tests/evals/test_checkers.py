"""Checkers score what a replay did (pure): tool calls by argument patterns, text sent, and a
rubric only a judge model decides; a checker that cannot work is refused with a reason."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from nightowl.evals.cases import CaseError, Checker, EvalCase
from nightowl.evals.checkers import Attempt, Check, judge_verdict, score
from nightowl.evals.replay import replay_case, replay_tools
from nightowl.messages import ToolCall
from nightowl.models.pricing import PriceTable
from nightowl.models.scripted import ScriptedModel
from tests.evals.scripts import scripted_for

TIMER = ToolCall("c1", "set_timer", {"seconds": 600, "note": "Bread"})


def test_tool_patterns_match_argument_values_as_text() -> None:
    checker = Checker.from_dict(
        {
            "expect_tools": [{"name": "set_timer", "arguments": {"seconds": "^600$"}}],
            "forbid_tools": [{"name": "set_timer", "arguments": {"note": "cake"}}],
        }
    )
    assert score(checker, Attempt((TIMER,))).passed
    assert not score(checker, Attempt()).passed  # never called
    cake = ToolCall("c2", "set_timer", {"seconds": 600, "note": "CAKE"})
    verdict = score(checker, Attempt((cake,)))
    assert not verdict.passed
    assert [c.passed for c in verdict.checks] == [True, False]
    missing = Checker.from_dict({"expect_tools": [{"name": "set_timer", "arguments": {"x": "."}}]})
    assert not score(missing, Attempt((TIMER,))).passed  # an argument it lacks never matches


def test_text_checks_read_only_what_was_sent() -> None:
    checker = Checker.from_dict({"require_text": ["canberra"], "forbid_text": ["sydney"]})
    assert score(checker, Attempt(sent=("It is Canberra.",))).passed
    assert not score(checker, Attempt(sent=("Canberra, not Sydney",))).passed
    assert not score(checker, Attempt(sent=())).passed


def test_a_rubric_decides_only_with_a_judge() -> None:
    checker = Checker.from_dict({"rubric": "says Canberra"})
    unjudged = score(checker, Attempt(sent=("Canberra",)))
    assert not unjudged.passed and unjudged.checks[0].passed is None
    assert score(checker, Attempt(), judge_verdict("PASS: it does")).passed
    assert not score(checker, Attempt(), judge_verdict("FAIL: it does not")).passed
    assert judge_verdict("maybe") == Check(
        "rubric", False, "the judge did not answer PASS or FAIL: 'maybe'"
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({}, "at least one check"),
        ({"require": ["x"]}, "unknown checker fields"),
        ({"require_text": "x"}, "list of regular expressions"),
        ({"forbid_text": ["("]}, "bad regular expression"),
        ({"expect_tools": ["shell"]}, "object with a 'name'"),
        ({"expect_tools": [{"name": "shell", "arguments": ["x"]}]}, "maps argument names"),
        ({"rubric": "\ud800"}, "well-formed Unicode"),
        ({"require_text": ["a\x00b"]}, "NUL"),
        ([], "a JSON object"),
    ],
)
def test_a_checker_that_cannot_work_is_refused(data: object, reason: str) -> None:
    with pytest.raises(CaseError, match=reason):
        Checker.from_dict(data)


def test_a_call_the_real_tool_would_refuse_gets_its_refusal_on_replay(tmp_path: Path) -> None:
    case = EvalCase.from_dict(
        {
            "id": "timer",
            "history": [{"kind": "user", "text": "Remind me in 10 minutes."}],
            "tool_results": [{"tool": "set_timer", "text": "Timer set for 600 s."}],
            "checker": {"expect_tools": [{"name": "set_timer", "arguments": {"seconds": "600"}}]},
        }
    )
    no_seconds = {"tool_calls": [{"name": "set_timer", "arguments": {"note": "bread"}}]}
    model = scripted_for(case, [no_seconds], tmp_path)
    replay = asyncio.run(replay_case(case, model, tools=replay_tools(), prices=PriceTable()))
    assert not replay.verdict.passed
    assert replay.verdict.checks[0].why == "no call matched"
    # The recorded result did not stand in for a call the real tool would refuse.
    assert replay.attempt.results[0].startswith("The arguments for set_timer are invalid")


def test_the_turns_guard_stops_a_replay_that_repeats_a_call(tmp_path: Path) -> None:
    case = EvalCase.from_dict(
        {
            "id": "loop",
            "history": [{"kind": "user", "text": "Wait a bit."}],
            "checker": {"forbid_text": ["x"]},
        }
    )
    wait = {"tool_calls": [{"name": "wait", "arguments": {"seconds": 1}}]}
    model = scripted_for(case, [wait] * 6, tmp_path)
    replay = asyncio.run(replay_case(case, model, tools=replay_tools(), prices=PriceTable()))
    assert len(replay.attempt.calls) == 4
    assert "same arguments 4 times" in replay.attempt.results[-1]


def test_a_judge_model_decides_a_rubric_on_replay(tmp_path: Path) -> None:
    case = EvalCase.from_dict(
        {
            "id": "capital",
            "history": [{"kind": "user", "text": "Capital of Australia?"}],
            "checker": {"rubric": "Says Canberra."},
        }
    )
    send = {"name": "send_to_user", "arguments": {"text": "Canberra.", "final": True}}
    model = scripted_for(case, [{"tool_calls": [send]}], tmp_path)
    for verdict, passed in (("PASS: it says Canberra", True), ("FAIL: no", False)):
        judge_script = tmp_path / f"judge-{passed}.json"
        judge_script.write_text(json.dumps({"replies": [{"text": verdict}]}))
        judge = ScriptedModel(judge_script)
        replay = asyncio.run(
            replay_case(case, model, tools=replay_tools(), prices=PriceTable(), judge=judge)
        )
        assert replay.verdict.passed is passed
        assert replay.verdict.checks[0].why == verdict
