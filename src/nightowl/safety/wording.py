"""What the owner and the agent read about a held action (pure).

The owner approves exactly what will run. The approval shows the arguments as JSON, with
every character that could hide text or start a line escaped (`\\uXXXX` is still valid JSON for
the same value), in a code span no argument can close; long ones are previewed with their full
length said, and travel whole in the message's controls (`action`) for the app's "Show all".
Reasons (which may quote a URL or the reviewer's words) are shown with anything that could
format text, make a link or fake a line neutralised.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

PREVIEW_CHARS = 600
# Control, format (bidi overrides, zero-width, tag characters), private and unassigned
# characters, and every line or paragraph separator.
_HIDING = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
_MARKUP = re.compile(r"[`*_~\[\]]|://|^[-+>#=]|^\d+[.)]")


def _escaped(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def escape_hidden(text: str, keep: str = "") -> str:
    """The text with every character that could hide or reorder text, or break a line,
    written as `\\uXXXX` (a space, and what `keep` names, stays as it is)."""
    return "".join(
        c
        if c == " " or c in keep
        else _escaped(c)
        if unicodedata.category(c) in _HIDING or unicodedata.category(c) == "Zs"
        else c
        for c in text
    )


def code_span(text: str) -> str:
    """A markdown code span around text (already escaped) that nothing inside can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plain(text: str) -> str:
    """Text shown as it is: hidden characters escaped and every word that markdown would
    format or link put in a code span."""
    words = escape_hidden(text).split(" ")
    return " ".join(code_span(w) if _MARKUP.search(w) else w for w in words)


def arguments_json(arguments: dict[str, Any], indent: int | None = None) -> str:
    """The arguments exactly, as JSON, with hidden characters escaped (JSON escapes every
    line break inside a string, so an indented layout keeps only its own)."""
    layout = "\n" if indent is not None else ""
    return escape_hidden(json.dumps(arguments, ensure_ascii=False, indent=indent), keep=layout)


def action_detail(tool: str, effect: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The whole action for the approval's controls: what the app shows behind "Show all"."""
    shown = arguments_json(arguments, indent=2)
    return {
        "tool": tool,
        "effect": effect,
        "arguments": shown,
        "chars": len(arguments_json(arguments)),
        "cut": len(arguments_json(arguments)) > PREVIEW_CHARS,
    }


def _arguments_line(arguments: dict[str, Any]) -> str:
    text = arguments_json(arguments)
    if len(text) <= PREVIEW_CHARS:
        return code_span(text)
    return (
        f"{code_span(text[:PREVIEW_CHARS] + '…')} (the first {PREVIEW_CHARS:,} of "
        f"{len(text):,} characters; the approval holds them all: Show all)"
    )


def approval_text(
    tool: str,
    effect: str,
    arguments: dict[str, Any],
    reasons: Sequence[str],
    traces: Sequence[str],
    window_s: float,
) -> str:
    """The approval request the owner reads: the action, why it is held, what was traced."""
    lines = [
        f"**Approve this action?** {code_span(tool)} ({effect}) with {_arguments_line(arguments)}",
        "",
        "Held because: " + "; ".join(plain(r) for r in reasons) + ".",
    ]
    if traces:
        lines.append("Careful: " + "; ".join(plain(t) for t in traces) + ".")
    lines.append(f"Without an answer within {window_s:g} seconds it stays blocked.")
    return "\n".join(lines)


def rerun_text(
    tool: str, effect: str, arguments: dict[str, Any], reason: str, window_s: float
) -> str:
    """The question the owner reads when a call with an effect was cut off by a crash."""
    return "\n".join(
        [
            f"**Run this action again?** {code_span(tool)} ({effect}) with "
            f"{_arguments_line(arguments)}",
            "",
            f"Careful: {plain(reason)}. Running it again may do it twice.",
            f"Without an answer within {window_s:g} seconds it is not run again.",
        ]
    )


def blocked_text(tool: str, reason: str, outcome: str) -> str:
    """The tool result a blocked action gets, in words the agent can act on."""
    return (
        f"Not done: {tool} was held by nightowl's safety review ({reason}) and {outcome}. "
        "Do not retry it or reach the same result another way (another tool, the browser or "
        "the shell). Tell the owner what you wanted to do and why, and let them decide."
    )
