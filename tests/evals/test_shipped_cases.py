"""The shipped starter set is part of the project's checks: every case replays through the
runner on a scripted model, passing with the reply that does the right thing and failing
with the one that repeats the mistake (so each checker can fail, and the runner works)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nightowl.evals.cases import EvalCase, load_shipped
from nightowl.evals.replay import replay_case, replay_tools
from nightowl.evals.starter import STARTER_DIR
from nightowl.models.pricing import PriceTable
from tests.evals.scripts import scripted_for

SHIPPED = load_shipped(STARTER_DIR)


def test_the_starter_set_has_thirty_cases_each_with_a_checker() -> None:
    assert len(SHIPPED) >= 30
    assert all(not case.checker.is_empty() for case in SHIPPED)
    assert all(case.scripted.get("right") and case.scripted.get("wrong") for case in SHIPPED)


@pytest.mark.parametrize("case", SHIPPED, ids=[case.id for case in SHIPPED])
def test_a_shipped_case_passes_right_and_fails_wrong(case: EvalCase, tmp_path: Path) -> None:
    tools, prices = replay_tools(), PriceTable()
    for kind, should_pass in (("right", True), ("wrong", False)):
        model = scripted_for(case, case.scripted[kind], tmp_path)
        replay = asyncio.run(replay_case(case, model, tools=tools, prices=prices))
        assert replay.error == ""
        assert replay.verdict.passed is should_pass, (kind, replay.to_dict())
