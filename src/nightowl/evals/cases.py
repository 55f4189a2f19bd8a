"""An eval case as plain data: what the model saw up to the failing step, what the tools
returned then (they stand in for the tools on replay, so a replay calls nothing real), the
owner's words, and the checker that says whether a replay did the right thing.

Cases live in two places with one shape: the starter set ships as JSON files in
`evals/cases/` (each may carry `scripted` replies: the reply that does the right thing and
the one that repeats the mistake, so `make test` proves the runner and checkers), and the
owner's own cases live in the store (`eval_cases`), drafts until kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightowl.messages import Entry

SOURCES = (
    "shipped",  # the starter set in evals/cases/
    "marked",  # the owner marked a reply wrong
    "guard_stop",  # the guard stopped a turn (too many steps, the same call again and again)
    "tool_error_loop",  # tool calls failed several times in a row
    "approved_block",  # the reviewer blocked a call the owner then approved: a false positive
    "denied_approval",  # the owner denied a call the agent wanted to make
    "misunderstood",  # the owner cut in with a correction that says the agent got it wrong
)
STATUSES = ("draft", "kept", "dropped")


class CaseError(ValueError):
    """A case or checker that cannot be used, in words for the person who wrote it."""


@dataclass(frozen=True)
class ToolPattern:
    """A tool call a checker looks for: the tool's name and, per argument, a regular
    expression its value must contain (searched case-insensitively in the value as text)."""

    name: str
    arguments: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: Any) -> ToolPattern:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise CaseError("a tool pattern is an object with a 'name' (and 'arguments')")
        arguments = data.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise CaseError(f"{data['name']}: 'arguments' maps argument names to patterns")
        for pattern in arguments.values():
            _compiled(str(pattern))
        return cls(_text(data["name"]), {_text(k): _text(v) for k, v in arguments.items()})


@dataclass(frozen=True)
class Checker:
    """What a replay must (not) do: tool calls expected or forbidden, text the owner must
    (not) be sent (regular expressions, case-insensitive), and a rubric for a judge model."""

    expect_tools: tuple[ToolPattern, ...] = ()
    forbid_tools: tuple[ToolPattern, ...] = ()
    require_text: tuple[str, ...] = ()
    forbid_text: tuple[str, ...] = ()
    rubric: str = ""

    def is_empty(self) -> bool:
        return not (
            self.expect_tools
            or self.forbid_tools
            or self.require_text
            or self.forbid_text
            or self.rubric
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "expect_tools": [p.to_dict() for p in self.expect_tools],
            "forbid_tools": [p.to_dict() for p in self.forbid_tools],
            "require_text": list(self.require_text),
            "forbid_text": list(self.forbid_text),
            "rubric": self.rubric,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Checker:
        """A checker from JSON data; a clear `CaseError` for anything it cannot use."""
        if not isinstance(data, dict):
            raise CaseError("a checker is a JSON object")
        known = {"expect_tools", "forbid_tools", "require_text", "forbid_text", "rubric"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CaseError(f"unknown checker fields {unknown}; use {sorted(known)}")
        texts = {}
        for name in ("require_text", "forbid_text"):
            values = data.get(name) or []
            if not isinstance(values, list):
                raise CaseError(f"'{name}' is a list of regular expressions")
            texts[name] = tuple(_compiled(str(v)).pattern for v in values)
        checker = cls(
            expect_tools=tuple(ToolPattern.from_dict(p) for p in data.get("expect_tools") or []),
            forbid_tools=tuple(ToolPattern.from_dict(p) for p in data.get("forbid_tools") or []),
            require_text=texts["require_text"],
            forbid_text=texts["forbid_text"],
            rubric=_text(data.get("rubric") or ""),
        )
        if checker.is_empty():
            raise CaseError("a checker needs at least one check (tools, text or a rubric)")
        return checker


def _text(value: Any) -> str:
    """A checker's text as stored: well-formed, without NUL (neither can be kept as text on
    PostgreSQL)."""
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CaseError("checker text must be well-formed Unicode (no lone surrogates)") from None
    if "\x00" in text:
        raise CaseError("checker text must not contain a NUL character")
    return text


def _compiled(pattern: str) -> re.Pattern[str]:
    pattern = _text(pattern)
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as error:
        raise CaseError(f"bad regular expression {pattern!r}: {error}") from None


@dataclass(frozen=True)
class RecordedResult:
    """What a tool returned when the failure happened (redacted), with the trust it had."""

    tool: str
    arguments: dict[str, Any]
    text: str
    is_error: bool = False
    trust: str = "agent"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "text": self.text,
            "is_error": self.is_error,
            "trust": self.trust,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordedResult:
        return cls(
            tool=str(data["tool"]),
            arguments=dict(data.get("arguments") or {}),
            text=str(data.get("text", "")),
            is_error=bool(data.get("is_error", False)),
            trust=str(data.get("trust", "agent")),
            meta=dict(data.get("meta") or {}),
        )


@dataclass(frozen=True)
class EvalCase:
    """One case: replayed from `history` (what the model saw before the failing step)."""

    id: str
    title: str
    source: str
    history: tuple[Entry, ...]
    checker: Checker
    tool_results: tuple[RecordedResult, ...] = ()
    owner_words: str = ""  # what the owner said should have happened
    failed_reply: str = ""  # what the agent said or did instead
    status: str = "kept"
    # Shipped cases only: scripted replies ("right", "wrong") that prove the checker.
    scripted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        """What the store keeps in a case row's `data`."""
        return {
            "history": [entry.to_dict() for entry in self.history],
            "tool_results": [result.to_dict() for result in self.tool_results],
            "owner_words": self.owner_words,
            "failed_reply": self.failed_reply,
        }

    def to_dict(self) -> dict[str, Any]:
        found = {
            "id": self.id,
            "title": self.title,
            "source": self.source,
            "status": self.status,
            **self.data(),
            "checker": self.checker.to_dict(),
        }
        if self.scripted:
            found["scripted"] = self.scripted
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalCase:
        """A case from JSON data (a shipped file, or a row's columns merged)."""
        try:
            history = tuple(Entry.from_dict(e) for e in data["history"])
            results = tuple(RecordedResult.from_dict(r) for r in data.get("tool_results") or [])
        except (KeyError, TypeError) as error:
            raise CaseError(f"case {data.get('id')!r}: malformed history ({error})") from None
        if not any(entry.kind == "user" for entry in history):
            raise CaseError(f"case {data.get('id')!r}: the history has no message to answer")
        return cls(
            id=str(data["id"]),
            title=str(data.get("title") or data["id"]),
            source=str(data.get("source") or "shipped"),
            history=history,
            checker=Checker.from_dict(data.get("checker")),
            tool_results=results,
            owner_words=str(data.get("owner_words") or ""),
            failed_reply=str(data.get("failed_reply") or ""),
            status=str(data.get("status") or "kept"),
            scripted=dict(data.get("scripted") or {}),
        )


SHIPPED_PREFIX = "shipped:"


def load_shipped(folder: Path) -> list[EvalCase]:
    """The starter set: every `*.json` file in `folder`, each one case or a list of cases,
    ids prefixed `shipped:` so results never mix with a stored case's."""
    cases: list[EvalCase] = []
    for path in sorted(folder.glob("*.json")):
        try:
            loaded = json.loads(path.read_text())
        except ValueError as error:
            raise CaseError(f"{path}: not JSON ({error})") from None
        for item in loaded if isinstance(loaded, list) else [loaded]:
            case = EvalCase.from_dict({**item, "source": "shipped"})
            cases.append(
                EvalCase.from_dict(
                    {**case.to_dict(), "id": SHIPPED_PREFIX + case.id.removeprefix(SHIPPED_PREFIX)}
                )
            )
    ids = [case.id for case in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CaseError(f"{folder}: duplicate case ids {duplicates}")
    return cases
