"""A routine's watch: a check that runs without the model and decides whether a firing is
worth a turn (pure: what was seen is passed in).

A watch looks at one thing — a web page (`url`), a file in the owner's computer (`file`), or a
webhook's deliveries (`webhook`) — and remembers what it saw last. When a due time comes and
the thing is as it was, the firing is `skipped: nothing changed` and costs no model tokens;
when it changed, the turn is told what changed (a page's or file's lines as a diff, the number
of new deliveries). The first check only records what is there.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WATCH_KINDS = ("url", "file", "webhook")
# What is remembered of a page or file to show a diff next time, and the diff's size.
MAX_KEPT = 100_000
MAX_DIFF = 4_000
UNCHANGED = "nothing changed"
_WEBHOOK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Watch(BaseModel):
    """What a routine watches. `target`: an http(s) URL, a path in the owner's computer
    (relative to its home), or a webhook's id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["url", "file", "webhook"] = Field(
        description="url: a web page; file: a file in the computer's home; webhook: its deliveries"
    )
    target: str = Field(
        min_length=1,
        max_length=2_000,
        description="an http(s) URL, a path relative to the home, or a webhook's id",
        examples=["https://example.com/status"],
    )

    @field_validator("target")
    @classmethod
    def _plain(cls, value: str) -> str:
        if value != value.strip() or any(c in value for c in "\r\n\t\0"):
            raise ValueError("the target is one line without surrounding spaces")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the target is not well-formed text") from None
        return value

    @model_validator(mode="after")
    def _fits_kind(self) -> Watch:
        if self.kind == "url":
            parts = urlsplit(self.target)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("a url watch needs an http(s) URL with a host")
        elif self.kind == "webhook":
            if not _WEBHOOK_ID.fullmatch(self.target):
                raise ValueError(
                    "a webhook watch needs a webhook's id, e.g. hook_3802cc3f46e8b97f2716857d "
                    "(`nightowl hooks list`)"
                )
        elif self.kind == "file":
            path = self.target
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(
                    "a file watch needs a path inside the computer's home, e.g. reports/today.md "
                    "(not absolute, no '..')"
                )
        return self

    def describe(self) -> str:
        """In words, for the firing's message and the routine's listing."""
        return {
            "url": f"the page {self.target}",
            "file": f"the file {self.target} in your computer",
            "webhook": f"the webhook {self.target}'s deliveries",
        }[self.kind]


@dataclass(frozen=True)
class Seen:
    """What a check saw: a page's or file's text, or for a webhook the key of its newest
    delivery (`text`) and how many it has had (`count`, which only words the change: old
    deliveries may be cleaned away). `missing`: the file does not exist (yet)."""

    text: str = ""
    count: int = 0
    missing: bool = False

    def digest(self) -> str:
        return hashlib.sha256(f"{self.missing}:{self.text}".encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """What a check means for the firing: `changed` (run, telling `what`), or not (skip,
    `what` says why); `state` is what to remember for the next check."""

    changed: bool
    what: str
    state: str


def judge(watch: Watch, previous: str | None, seen: Seen) -> Verdict:
    """Compare what was seen with what the watch remembered (`previous`, None at first)."""
    state = json.dumps({"digest": seen.digest(), "text": seen.text[:MAX_KEPT], "count": seen.count})
    if previous is None:
        return Verdict(False, f"{UNCHANGED}: first check, what is there now is recorded", state)
    try:
        before = json.loads(previous)
    except ValueError:
        before = {}
    if before.get("digest") == seen.digest():
        return Verdict(False, UNCHANGED, previous)
    if watch.kind == "webhook":
        new = max(seen.count - int(before.get("count") or 0), 1)
        return Verdict(True, f"{new} new delivery(ies) since the last check", state)
    if seen.missing:
        return Verdict(True, f"{watch.describe()} no longer exists", state)
    return Verdict(True, _diff(str(before.get("text") or ""), seen.text), state)


def _diff(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), "before", "now", n=1, lineterm=""
    )
    diff = "\n".join(lines)
    if len(diff) > MAX_DIFF:
        diff = diff[:MAX_DIFF] + f"\n[… {len(diff) - MAX_DIFF:,} more characters of the diff]"
    return diff or "(only bytes beyond what is compared changed)"
