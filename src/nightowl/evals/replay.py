"""Replaying a case through the real harness: the prompt as nightowl builds it today
(`harness.prompt.assemble` with the instructions the model's adapter picks and today's tool
catalogue), the model called for real, and the case's recorded tool results standing in for
every tool, so a replay calls nothing real (no shell, no web, no send).

Why not inspect-ai: it is a well-kept evaluation framework, but it wants to own the two
things this replay exists to keep ours: the model call (its own `ModelAPI` providers, fed its
own `ChatMessage` list, where nightowl's fenced outside text, pinned catalogue and newest note
would be translated a second time) and the agent loop (its solvers). Wrapping our `Model` as
an Inspect provider and our loop as a solver would test the wrapper, pull in a large
dependency tree, and keep results in Inspect's log files, while the web page and the
fixed/regressed comparison want them in the app store. So this is a small runner over the
harness's own pieces; `evals/checkers.py` scores what it did.

What a replay leaves out, on purpose: the safety gate (a forbidden call counts as attempted,
whether or not the gate would have held it) and the engine's retry when a reply parrots an
earlier one. The browser and desktop tools are not in the catalogue (building them needs a
computer); a call to one gets the recorded result like any other tool.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from nightowl.evals.cases import EvalCase, RecordedResult
from nightowl.evals.checkers import JUDGE_PROMPT, Attempt, Verdict, judge_verdict, score
from nightowl.harness.guard import GuardLimits, check_guard
from nightowl.harness.prompt import assemble, instructions_for
from nightowl.harness.transcript import fence
from nightowl.messages import Entry, ModelRequest, ToolCall, Usage
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.helper_agents import HELPER_MANAGER_TOOLS
from nightowl.tools.registry import ToolRegistry, ToolResult
from nightowl.tools.send_drafts import SEND_TOOLS

MAX_MODEL_CALLS = 6  # a case is one turn's decision, not a long task
REPLAY_LIMITS = GuardLimits(max_steps=MAX_MODEL_CALLS)
NEWEST_NOTE = "Current time: {at}."


def replay_tools() -> ToolRegistry:
    """Today's catalogue for a conversation's turn: the built-in, send and helper tools."""
    registry = builtin_registry()
    for tool in [*SEND_TOOLS, *HELPER_MANAGER_TOOLS]:
        registry.add(tool)
    return registry


@dataclass(frozen=True)
class Replay:
    """One replay of one case on one model: what it did, its score and what it cost."""

    case_id: str
    model: str
    verdict: Verdict
    attempt: Attempt
    tokens: int = 0
    cost_usd: float | None = 0.0
    seconds: float = 0.0
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case_id,
            "model": self.model,
            "passed": self.verdict.passed,
            "checks": self.verdict.to_dict()["checks"],
            "calls": [call.to_dict() for call in self.attempt.calls],
            "sent": list(self.attempt.sent),
            "results": [text[:500] for text in self.attempt.results],
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


@dataclass
class _Spend:
    tokens: int = 0
    cost: float | None = 0.0

    def add(self, prices: PriceTable, model: str, usage: Usage) -> None:
        self.tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.tokens += usage.output_tokens
        cost = prices.cost(model, usage)
        self.cost = None if cost is None or self.cost is None else self.cost + cost


@dataclass
class _Run:
    """A replay in progress: the history as it grows, the calls made, what was sent."""

    history: list[Entry]
    calls: list[ToolCall] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    used: set[int] = field(default_factory=set)  # recorded results already handed out


def stand_in(case: EvalCase, run: _Run, tools: ToolRegistry, call: ToolCall) -> tuple[Entry, bool]:
    """The result a call gets on replay, and whether it ends the turn: a call whose
    arguments today's tool would refuse gets that refusal; send_to_user is taken as sent;
    load_tools searches today's catalogue; anything else gets the case's recorded result
    (same tool and arguments first, then the same tool's next unused one)."""

    def result(text: str, *, is_error: bool = False, trust: str = "agent", **meta: Any) -> Entry:
        return Entry(
            kind="tool_result",
            text=text,
            call_id=call.id,
            tool_name=call.name,
            is_error=is_error,
            trust=trust,
            meta=meta,
        )

    if tools.get(call.name) is not None:  # arguments the real tool would refuse, refused
        parsed = tools.parse_arguments(call.name, call.arguments)
        if isinstance(parsed, ToolResult):
            return result(parsed.content, is_error=True, **parsed.meta), False
    if call.name == "send_to_user":
        run.sent.append(str(call.arguments.get("text", "")))
        final = bool(call.arguments.get("final"))
        return result(f"Delivered to the user (message #{len(run.sent)})."), final
    if call.name == "load_tools":
        found = [
            t for t in tools.search(str(call.arguments.get("query", ""))) if t.name != call.name
        ]
        if not found:
            return result(
                f"No tool matches. The tools are: {', '.join(tools.names())}.", is_error=True
            ), False
        lines = "\n".join(f"{t.name} ({t.effect}): {t.summary}" for t in found[:5])
        loaded = [t.name for t in found[:5]]
        return result("Loaded; you can call these now:\n" + lines, loaded=loaded), False
    recorded = _recorded_for(case.tool_results, run.used, call)
    if recorded is None:
        return result(
            f"The tool {call.name} has no recorded result in this eval case (a replay runs "
            "no real tool). Go on without it.",
            is_error=True,
        ), False
    return result(
        recorded.text, is_error=recorded.is_error, trust=recorded.trust, **recorded.meta
    ), False


def _recorded_for(
    results: tuple[RecordedResult, ...], used: set[int], call: ToolCall
) -> RecordedResult | None:
    same_tool = [i for i, r in enumerate(results) if r.tool == call.name]
    exact = [i for i in same_tool if results[i].arguments == call.arguments]
    for index in [*exact, *[i for i in same_tool if i not in used], *same_tool]:
        used.add(index)
        return results[index]
    return None


async def replay_case(
    case: EvalCase,
    model: Model,
    *,
    tools: ToolRegistry,
    prices: PriceTable,
    judge: Model | None = None,
    at: str = "2026-12-01 09:00 UTC",
) -> Replay:
    """Replay `case` on `model` until it ends its turn (no tool calls, or a final
    send_to_user) or makes `MAX_MODEL_CALLS` calls, and score it; a model failure is a
    failed replay with its error."""
    started = time.perf_counter()
    run = _Run(history=list(case.history))
    spend = _Spend()
    error = ""
    try:
        for step in range(MAX_MODEL_CALLS):
            # The turn's own guard: the same call again and again stops a replay as a turn.
            stopped = check_guard(REPLAY_LIMITS, step, run.calls)
            if stopped:
                run.results.append(f"(stopped by the guard: {stopped})")
                break
            request = assemble(
                tools.summaries(),
                tools.specs(),
                run.history,
                NEWEST_NOTE.format(at=at),
                instructions=instructions_for(model),
                groups=tools.groups(),
            )
            reply = await model.complete(request)
            spend.add(prices, model.name, reply.usage)
            run.history.append(
                Entry(kind="assistant", text=reply.text, tool_calls=reply.tool_calls)
            )
            if not reply.tool_calls:
                break
            ended = False
            for call in reply.tool_calls:
                run.calls.append(call)
                entry, ends = stand_in(case, run, tools, call)
                run.history.append(entry)
                run.results.append(entry.text)
                ended = ended or ends
            if ended:
                break
    except Exception as failure:  # the model failed: the replay fails and says how
        error = f"{type(failure).__name__}: {failure}"[:500]
    attempt = Attempt(tuple(run.calls), tuple(run.sent), tuple(run.results))
    judged = None
    if judge is not None and case.checker.rubric and not error:
        judged_reply = await judge.complete(_judge_request(case, attempt))
        spend.add(prices, judge.name, judged_reply.usage)
        judged = judge_verdict(judged_reply.text)
    verdict = score(case.checker, attempt, judged)
    if error:
        verdict = Verdict(False, verdict.checks)
    return Replay(
        case_id=case.id,
        model=model.name,
        verdict=verdict,
        attempt=attempt,
        tokens=spend.tokens,
        cost_usd=spend.cost,
        seconds=time.perf_counter() - started,
        error=error,
    )


def _judge_request(case: EvalCase, attempt: Attempt) -> ModelRequest:
    """The judge's request: the rubric (the owner's), and what the assistant did, fenced as
    data (a reply may carry text that tries to talk to the judge)."""
    did = json.dumps(
        {"sent": list(attempt.sent), "calls": [c.to_dict() for c in attempt.calls]}, indent=1
    )
    text = f"Rubric: {case.checker.rubric}\n\nWhat the assistant did:\n{fence(did)}"
    return ModelRequest(
        system=JUDGE_PROMPT,
        tools=(),
        messages=(Entry(kind="user", text=text),),
        max_output_tokens=200,
        purpose="judge",
    )
