"""Section hashes of a model request, and the cache break between two requests.

A request is, in order: the loaded tools (one section each), the system prompt, every history
entry, and last the newest note (the time and what changed). A provider caches the longest
identical prefix, so the next request of a conversation must repeat every section of the
previous one but its newest note. When it does not, the first section that differs names the
cache break. A tool loaded since is expected (explained); anything else is a bug to fix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nightowl.models.base import ModelRequest

NEWEST = "newest"


def _digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_sections(request: ModelRequest, newest_note: bool = True) -> list[tuple[str, str]]:
    """(name, hash) of every section, in the order the request sends them."""
    sections = [
        (f"tool:{spec.name}", _digest([spec.name, spec.description, spec.parameters]))
        for spec in request.tools
    ]
    sections.append(("system", _digest(request.system)))
    messages = list(request.messages)
    last = messages.pop() if newest_note and messages else None
    sections += [(f"history:{n}", _digest(entry.to_dict())) for n, entry in enumerate(messages)]
    if last is not None:
        sections.append((NEWEST, _digest(last.to_dict())))
    return sections


@dataclass(frozen=True)
class CacheBreak:
    """Where a request stopped repeating the previous one, and whether that was expected."""

    section: str
    reason: str
    explained: bool


def find_cache_break(
    previous: Sequence[Sequence[str]], current: Sequence[Sequence[str]]
) -> CacheBreak | None:
    """The break between two consecutive requests of a conversation, or None."""
    before = [tuple(s) for s in previous]
    if before and before[-1][0] == NEWEST:
        before.pop()  # the previous newest note is meant to be replaced
    now = [tuple(s) for s in current]
    for index, section in enumerate(before):
        if index >= len(now):
            return CacheBreak(section[0], "the request is shorter than the previous one", False)
        if now[index] == section:
            continue
        name, new_name = section[0], now[index][0]
        if new_name.startswith("tool:") and new_name not in {s[0] for s in before}:
            return CacheBreak(new_name, "a tool was loaded", True)
        if name == new_name:
            return CacheBreak(name, f"{name} changed", False)
        return CacheBreak(new_name, f"{new_name} came where {name} was", False)
    return None
