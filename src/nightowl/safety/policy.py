"""What needs review and what needs the owner's approval, as pure functions of the history.

A turn is *tainted* once untrusted content (e-mail, webhooks, web pages, files and command
output from the agent's computer, other people) is in its context. In a tainted turn, `send`
and `spend` actions, new routines, calls that use a secret, requests to hosts the owner did
not name, shell commands that are not plain reads, browser and desktop actions that may submit,
and files replaced need the owner's approval whatever the model — or the reviewer — says.
In any turn, a secret sent anywhere but its allowed hosts does (safety/destinations.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightowl.harness.transcript import outside_texts
from nightowl.messages import Entry
from nightowl.safety.data_flow import FlowContext, carried, flow_context
from nightowl.safety.destinations import destinations, secret_hold
from nightowl.safety.named_hosts import is_blank, opens_locally, request_urls, unclear_host
from nightowl.safety.shell_rules import read_only

REVIEWED_EFFECTS = ("write", "send", "spend")
# Tools whose only audience is the owner or this conversation: nothing to review.
OWNER_FACING = frozenset({"send_to_user", "set_timer"})
# Work handed between the agent and its own helpers: nothing leaves nightowl, the text carries
# its trust along (a task or guidance from a tainted turn is outside text to the helper, a
# tainted helper's report is outside text to its parent), and the helper's own actions pass
# this gate like any other. A review would only stall the hand-off.
HELPER_HANDOFFS = frozenset({"start_helper", "message_helper", "stop_helper", "report"})
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
    """Every write/send/spend action and every shell command, except owner-facing tools and
    hand-offs to and from helpers."""
    if tool in OWNER_FACING or tool in HELPER_HANDOFFS:
        return False
    return effect in REVIEWED_EFFECTS or tool in SHELL_TOOLS


def gated(tool: str, effect: str, arguments: dict[str, Any], *, connector: bool = False) -> bool:
    """Whether the gate looks at this call at all (other reads that use no secret pass
    straight, without a step); a `connector`'s tool is looked at when it takes a URL."""
    return (
        needs_review(tool, effect)
        or effect in ("send", "spend")
        or tool in ROUTINE_TOOLS
        or tool in WORKAROUND_TOOLS  # checked against the connectors that failed
        or bool(secret_names(arguments))
        or (connector and bool(request_urls(tool, arguments, connector=True)))
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
class HoldReason:
    """Why an action needs the owner's approval whatever the reviewer says ('' when none)."""

    reason: str = ""


def hold_for(
    tool: str,
    effect: str,
    arguments: dict[str, Any],
    history: Sequence[Entry],
    *,
    outside: Sequence[str] | None = None,
    overwrites: bool = False,
    takes_secrets: bool = True,
    bindings: Mapping[str, Sequence[str]] | None = None,
    egress: bool = True,
    flow: FlowContext | None = None,
    connector: bool = False,
) -> HoldReason:
    """The rule-based part of the gate: what needs approval regardless of the model (or of a
    reviewer that allows everything).

    `outside`: every outside text in the context, whole (the history's previews by default);
    `overwrites`: the call would replace a file the agent did not make in this turn;
    `takes_secrets`: the tool substitutes secrets (any other refuses a reference, so nothing
    can leak through it); `bindings`: each secret's allowed hosts; `egress`: the computer can
    reach the network (its shell and desktop then can send a secret anywhere); `flow`: the
    turn's private texts and earlier requests (from the history alone by default);
    `connector`: a connector's tool (any URL argument is a request)."""
    reasons = []
    if effect in ("send", "spend") and not owner_requests(history):
        reasons.append("nobody asked for outreach: the owner did not ask for this here")
    names = secret_names(arguments) if takes_secrets else []
    if names:  # in any turn: a secret goes only where it is meant to go
        reach = destinations(tool, arguments, egress=egress)
        reason = secret_hold(tool, names, reach, bindings or {})
        if reason:
            reasons.append(reason)
    outside = outside_texts(history) if outside is None else outside
    if outside:  # tainted
        context = flow if flow is not None else flow_context(history, outside=outside)
        reasons += _requests(tool, arguments, context, connector=connector, egress=egress)
        reasons += _irreversible(tool, arguments, overwrites)
        if tool in MEMORY_WRITES and traced_arguments(arguments, outside):
            reasons.append(f"it would keep text from outside in memory for later, {TAINTED}")
        if effect in ("send", "spend"):
            reasons.append(f"a {effect} action in a turn that read content not from the owner")
        if tool in ROUTINE_TOOLS:
            reasons.append("a new routine proposed in a turn that read content not from the owner")
        if names:
            reasons.append("it uses a secret in a turn that read content not from the owner")
        if tool in SHELL_TOOLS and traced_arguments(arguments, outside):
            reasons.append("a shell command taken from content not from the owner")
    return HoldReason("; ".join(reasons))


TAINTED = "in a turn that read content not from the owner"


def _requests(
    tool: str, arguments: dict[str, Any], flow: FlowContext, *, connector: bool, egress: bool
) -> list[str]:
    """In a tainted turn: a request whose URL would carry private text (the first one), or
    one that cannot be read plainly (a `file:` page too, when the computer can reach the
    network: a page the agent wrote can load an outside URL with private text in it)."""
    for url in request_urls(tool, arguments, connector=connector, egress=egress):
        if is_blank(url):  # the browser's empty page: nothing leaves
            continue
        if not egress and opens_locally(url):
            continue  # a page in a computer with no network can load nothing from outside
        unclear = unclear_host(url)
        if unclear:
            return [f"the request to {url} cannot be judged: {unclear}, {TAINTED}"]
        found = carried(url, flow)
        if found is not None:
            return [f"{found.describe()}, {TAINTED}"]
    return []


def _irreversible(tool: str, arguments: dict[str, Any], overwrites: bool) -> list[str]:
    """In a tainted turn: what outside text could have asked for and cannot be undone —
    a shell command that is not a plain read, a browser or desktop action that may submit,
    a file replaced."""
    reasons = []
    if tool in SHELL_TOOLS and not read_only(str(arguments.get("command", ""))):
        reasons.append(
            f"a shell command that may change or delete files, stop processes or reach the "
            f"network, {TAINTED}"
        )
    if tool in SUBMITTING_ACTIONS and _submits(tool, arguments):
        reasons.append(f"a {tool} that may submit a form or follow a link, {TAINTED}")
    if overwrites:
        reasons.append(f"it replaces a file you did not make in this turn, {TAINTED}")
    return reasons


# Tools that keep text for later turns: outside text copied into them would come back later.
MEMORY_WRITES = frozenset({"write_note", "write_skill"})
SUBMITTING_ACTIONS = frozenset({"browser_act", "desktop_click", "desktop_key", "desktop_type"})


def _submits(tool: str, arguments: dict[str, Any]) -> bool:
    if tool == "browser_act":
        return arguments.get("action") != "fill"  # click, select, press may submit
    if tool == "desktop_type":
        return "\n" in str(arguments.get("text", ""))  # a newline presses Return
    return True  # a click or a key anywhere on the desktop
