"""A run of the eval cases on one model: replay each, keep each result with its cost, and
compare with the model's previous result of each case (which got fixed, which regressed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nightowl.evals.cases import EvalCase
from nightowl.evals.replay import Replay, replay_case, replay_tools
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.store.database import Database
from nightowl.store.evals import add_result, last_results
from nightowl.store.ids import new_id


@dataclass(frozen=True)
class RunReport:
    """What a run found, as `nightowl evals run --json` and `make evals` print it."""

    run_id: str
    model: str
    replays: list[Replay]
    fixed: list[str] = field(default_factory=list)
    regressed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        costs = [r.cost_usd for r in self.replays]
        return {
            "run": self.run_id,
            "model": self.model,
            "cases": len(self.replays),
            "passed": sum(r.verdict.passed for r in self.replays),
            "cost_usd": None if None in costs else round(sum(c or 0.0 for c in costs), 6),
            "tokens": sum(r.tokens for r in self.replays),
            "seconds": round(self.seconds, 2),
            "fixed": self.fixed,
            "regressed": self.regressed,
            "results": [r.to_dict() for r in self.replays],
        }


async def run_cases(
    database: Database,
    cases: Sequence[EvalCase],
    model: Model,
    *,
    prices: PriceTable,
    judge: Model | None = None,
) -> RunReport:
    """Replay `cases` on `model` one at a time (a local model computes one reply at a time
    anyway), keep every result, and compare with the model's last result of each case."""
    run_id = new_id("evalrun")
    tools = replay_tools()
    started = time.perf_counter()

    def last_before() -> dict[str, Any]:
        with database.read() as session:
            return last_results(session, model.name, [case.id for case in cases], run_id)

    def keep(replay: Replay) -> None:
        # Each result as it comes: a long run on a local model that is stopped keeps its part.
        with database.write() as session:
            add_result(
                session,
                run_id=run_id,
                case_id=replay.case_id,
                model=model.name,
                passed=replay.verdict.passed,
                detail=replay.to_dict(),
                error=replay.error,
                cost_usd=replay.cost_usd,
                tokens=replay.tokens,
                seconds=replay.seconds,
            )

    before = await asyncio.to_thread(last_before)
    replays = []
    for case in cases:
        replay = await replay_case(case, model, tools=tools, prices=prices, judge=judge)
        await asyncio.to_thread(keep, replay)
        replays.append(replay)
    seconds = time.perf_counter() - started
    fixed = [r.case_id for r in replays if r.verdict.passed and _was(before, r, False)]
    regressed = [r.case_id for r in replays if not r.verdict.passed and _was(before, r, True)]
    return RunReport(run_id, model.name, replays, fixed, regressed, seconds)


def _was(before: dict[str, Any], replay: Replay, passed: bool) -> bool:
    found = before.get(replay.case_id)
    return found is not None and found.passed is passed
