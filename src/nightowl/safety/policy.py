"""What needs review and what needs the owner's approval, as pure functions of the history.

A turn is *tainted* once untrusted content (e-mail, webhooks, web pages, other people) is in
its context. In a tainted turn, `send` and `spend` actions, new routines, calls that use a
secret and shell commands the reviewer flags need the owner's approval whatever the model says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nightowl.harness.transcript import Entry, outside_texts

REVIEWED_EFFECTS = ("write", "send", "spend")
# Tools whose only audience is the owner or this conversation: nothing to review.
OWNER_FACING = frozenset({"send_to_user", "set_timer"})
SHELL_TOOLS = frozenset({"shell"})
ROUTINE_TOOLS = frozenset({"create_routine"})
WORKAROUND_TOOLS = frozenset({"shell", "browser_open", "browser_act", "web_fetch"})
SECRET_REF = re.compile(r"\{\{\s*secret:([A-Za-z0-9_.-]+)\s*\}\}")
_TOKENS = re.compile(
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail addresses
    r"|https?://[^\s\"'<>]+"  # URLs
    r"|\d[\d,]*(?:\.\d+)?"  # amounts and account numbers
)


@dataclass(frozen=True)
class Trace:
    """An argument whose value appears in content not from the owner."""

    argument: str
    value: str

    def describe(self) -> str:
        """The trace in words, for the approval request."""
        return f"{self.argument} ({self.value!r}) appears in content not from the owner"


def is_tainted(history: Sequence[Entry]) -> bool:
    """True once content not from the owner is in the context."""
    return bool(outside_texts(history))


def owner_requests(history: Sequence[Entry], limit: int = 3) -> list[str]:
    """The owner's newest messages (what the owner asked for), oldest first."""
    asked = [e.text for e in history if e.kind == "user" and e.trust == "owner" and e.text]
    return asked[-limit:]


def needs_review(tool: str, effect: str) -> bool:
    """Every write/send/spend action and every shell command, except owner-facing tools."""
    if tool in OWNER_FACING:
        return False
    return effect in REVIEWED_EFFECTS or tool in SHELL_TOOLS


def gated(tool: str, effect: str, arguments: dict[str, Any]) -> bool:
    """Whether the gate looks at this call at all (other reads that use no secret pass
    straight, without a step)."""
    return (
        needs_review(tool, effect)
        or effect in ("send", "spend")
        or tool in ROUTINE_TOOLS
        or tool in WORKAROUND_TOOLS  # checked against the connectors that failed
        or bool(secret_names(arguments))
    )


def _leaves(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _leaves(inner, f"{path}[{index}]")
    elif value is not None and not isinstance(value, bool):
        yield path, str(value)


def traced_arguments(arguments: dict[str, Any], texts: Sequence[str]) -> list[Trace]:
    """Arguments whose value (or a recipient, URL or amount in it) appears in outside text."""
    haystack = "\n".join(texts).lower()
    traces: list[Trace] = []
    if not haystack:
        return traces
    for path, value in _leaves(arguments, ""):
        candidates = [value] if len(value) <= 200 else []
        candidates += [t for t in _TOKENS.findall(value) if t not in candidates]
        for candidate in candidates:
            needle = candidate.strip().lower()
            if len(needle) >= 3 and needle in haystack:
                traces.append(Trace(path, candidate.strip()))
                break
    return traces


def secret_names(arguments: dict[str, Any]) -> list[str]:
    """The secrets an action refers to by name (`{{secret:NAME}}`)."""
    names: list[str] = []
    for _, value in _leaves(arguments, ""):
        names += [n for n in SECRET_REF.findall(value) if n not in names]
    return names


def failed_connectors(history: Sequence[Entry]) -> list[dict[str, Any]]:
    """Connectors (tools naming a service in their result) whose last call failed."""
    failed: dict[str, dict[str, Any]] = {}
    for entry in history:
        connector = entry.meta.get("connector") if entry.kind == "tool_result" else None
        if not isinstance(connector, dict) or not connector.get("service"):
            continue
        if entry.is_error:
            failed[str(connector["service"])] = connector
        else:
            failed.pop(str(connector["service"]), None)
    return list(failed.values())


def workaround_of(tool: str, arguments: dict[str, Any], failed: Sequence[dict[str, Any]]) -> str:
    """The failed connector's service this browser/shell call tries to reach instead, or ''."""
    if tool not in WORKAROUND_TOOLS or not failed:
        return ""
    text = " ".join(value for _, value in _leaves(arguments, "")).lower()
    for connector in failed:
        names = [str(connector["service"]), *[str(h) for h in connector.get("hosts", ())]]
        if any(name.lower() in text for name in names if len(name) >= 3):
            return str(connector["service"])
    return ""


@dataclass(frozen=True)
class Hold:
    """Why an action needs the owner's approval whatever the reviewer says ('' when none)."""

    reason: str = ""


def hold_for(
    tool: str,
    effect: str,
    arguments: dict[str, Any],
    history: Sequence[Entry],
) -> Hold:
    """The rule-based part of the gate: what needs approval regardless of the model."""
    reasons = []
    if effect in ("send", "spend") and not owner_requests(history):
        reasons.append("nobody asked for outreach: the owner did not ask for this here")
    outside = outside_texts(history)
    if outside:  # tainted
        if effect in ("send", "spend"):
            reasons.append(f"a {effect} action in a turn that read content not from the owner")
        if tool in ROUTINE_TOOLS:
            reasons.append("a new routine proposed in a turn that read content not from the owner")
        # Where a reference stays a reference (the owner's messages, sends) nothing leaks.
        substituted = tool not in OWNER_FACING and effect not in ("send", "spend")
        if substituted and secret_names(arguments):
            reasons.append("it uses a secret in a turn that read content not from the owner")
        if tool in SHELL_TOOLS and traced_arguments(arguments, outside):
            reasons.append("a shell command taken from content not from the owner")
    return Hold("; ".join(reasons))
