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

from nightowl.messages import ModelRequest

NEWEST = "newest"


CHARS_PER_TOKEN = 4  # the meter's estimate, for any model


def _section(name: str, value: Any) -> tuple[str, str, int]:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return (name, hashlib.sha256(text.encode()).hexdigest()[:16], len(text))


def request_sections(request: ModelRequest, newest_note: bool = True) -> list[tuple[str, str, int]]:
    """(name, hash, characters) of every section, in the order the request sends them."""
    sections = [
        _section(f"tool:{spec.name}", [spec.name, spec.description, spec.parameters])
        for spec in request.tools
    ]
    sections.append(_section("system", request.system))
    messages = list(request.messages)
    last = messages.pop() if newest_note and messages else None
    sections += [_section(f"history:{n}", entry.to_dict()) for n, entry in enumerate(messages)]
    if last is not None:
        sections.append(_section(NEWEST, last.to_dict()))
    return sections


def _key(section: Sequence[Any]) -> tuple[str, str]:
    return (str(section[0]), str(section[1]))


def prompt_tokens(sections: Sequence[Sequence[Any]]) -> int:
    """The request's size in tokens, estimated (4 characters a token)."""
    return sum(int(s[2]) for s in sections if len(s) > 2) // CHARS_PER_TOKEN


def shared_prefix_tokens(
    previous: Sequence[Sequence[Any]], current: Sequence[Sequence[Any]]
) -> int:
    """The prefix-cache meter: leading tokens of `current` that repeat `previous` section for
    section (estimated) — what a prefix-caching provider could serve from its cache."""
    shared = 0
    for before, now in zip(previous, current, strict=False):
        if _key(before) != _key(now):
            break
        shared += int(now[2]) if len(now) > 2 else 0
    return shared // CHARS_PER_TOKEN


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
    before = [_key(s) for s in previous]
    if before and before[-1][0] == NEWEST:
        before.pop()  # the previous newest note is meant to be replaced
    now = [_key(s) for s in current]
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
