"""Scoring a replay with its case's checker (pure): each check's verdict, in words.

A rubric is judged by a judge model when the run names one (`--judge`); without one, a
rubric is reported as not judged and does not decide the result, so a case whose only check
is a rubric needs a judge to pass or fail.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from nightowl.evals.cases import Checker, ToolPattern
from nightowl.messages import ToolCall

JUDGE_PROMPT = """You grade one reply of an assistant against the owner's rubric. Answer with \
one line: PASS: <why> or FAIL: <why>."""


@dataclass(frozen=True)
class Attempt:
    """What a replay did: every tool call the model made (in order), what it sent the
    owner (send_to_user texts) and what each call got back."""

    calls: tuple[ToolCall, ...] = ()
    sent: tuple[str, ...] = ()
    results: tuple[str, ...] = ()  # what each call got back on replay, in order


@dataclass(frozen=True)
class Check:
    """One check's verdict: `passed` None when it could not be judged (no judge model)."""

    check: str
    passed: bool | None
    why: str


@dataclass(frozen=True)
class Verdict:
    """A replay's score: passed when every judged check passed (and at least one was)."""

    passed: bool
    checks: tuple[Check, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [asdict(c) for c in self.checks]}


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def matches(pattern: ToolPattern, call: ToolCall) -> bool:
    """Whether `call` is `pattern`'s tool with every argument pattern found in its value."""
    if call.name != pattern.name:
        return False
    return all(
        name in call.arguments
        and re.search(expected, _as_text(call.arguments[name]), re.IGNORECASE) is not None
        for name, expected in pattern.arguments.items()
    )


def _describe(pattern: ToolPattern) -> str:
    arguments = ", ".join(f"{k}~/{v}/" for k, v in pattern.arguments.items())
    return f"{pattern.name}({arguments})"


def score(checker: Checker, attempt: Attempt, judged: Check | None = None) -> Verdict:
    """The checker's verdict on `attempt`; `judged`: the judge model's verdict on the rubric."""
    checks: list[Check] = []
    for pattern in checker.expect_tools:
        hit = any(matches(pattern, call) for call in attempt.calls)
        checks.append(
            Check(f"expect {_describe(pattern)}", hit, "called" if hit else "no call matched")
        )
    for pattern in checker.forbid_tools:
        hit = any(matches(pattern, call) for call in attempt.calls)
        checks.append(
            Check(f"forbid {_describe(pattern)}", not hit, "called" if hit else "not called")
        )
    said = "\n".join(attempt.sent)
    for expected in checker.require_text:
        hit = re.search(expected, said, re.IGNORECASE) is not None
        checks.append(
            Check(f"require text /{expected}/", hit, "sent" if hit else "not in what was sent")
        )
    for unwanted in checker.forbid_text:
        hit = re.search(unwanted, said, re.IGNORECASE) is not None
        checks.append(
            Check(f"forbid text /{unwanted}/", not hit, "sent" if hit else "not in what was sent")
        )
    if checker.rubric:
        checks.append(judged or Check("rubric", None, "not judged: run with --judge MODEL"))
    judged_checks = [c for c in checks if c.passed is not None]
    passed = bool(judged_checks) and all(c.passed for c in judged_checks)
    return Verdict(passed, tuple(checks))


def judge_verdict(reply_text: str) -> Check:
    """The rubric check from a judge model's one-line answer (PASS/FAIL first)."""
    line = reply_text.strip().splitlines()[0] if reply_text.strip() else ""
    verdict = line.split(":", 1)[0].strip().upper()
    if verdict not in ("PASS", "FAIL"):
        return Check("rubric", False, f"the judge did not answer PASS or FAIL: {line[:200]!r}")
    return Check("rubric", verdict == "PASS", line[:300])
