"""What the owner and the agent read about a held action (pure)."""

from __future__ import annotations

import json
from typing import Any


def _short_arguments(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= 600 else text[:597] + "..."


def approval_text(
    tool: str,
    effect: str,
    arguments: dict[str, Any],
    reasons: list[str],
    traces: list[str],
    window_s: float,
) -> str:
    """The approval request the owner reads: the action, why it is held, what was traced."""
    lines = [
        f"**Approve this action?** `{tool}` ({effect}) with `{_short_arguments(arguments)}`",
        "",
        "Held because: " + "; ".join(reasons) + ".",
    ]
    if traces:
        lines.append("Careful: " + "; ".join(traces) + ".")
    lines.append(f"Without an answer within {window_s:g} seconds it stays blocked.")
    return "\n".join(lines)


def blocked_text(tool: str, reason: str, outcome: str) -> str:
    """The tool result a blocked action gets, in words the agent can act on."""
    return (
        f"Not done: {tool} was held by nightowl's safety review ({reason}) and {outcome}. "
        "Do not retry it or reach the same result another way (another tool, the browser or "
        "the shell). Tell the owner what you wanted to do and why, and let them decide."
    )
