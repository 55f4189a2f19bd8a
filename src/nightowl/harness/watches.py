"""A routine's watch: a check that runs without the model and decides whether a firing is
worth a turn (pure: what was seen is passed in).

A watch looks at one thing — a web page (`url`), a file in the owner's computer (`file`), a
webhook's deliveries (`webhook`), a folder of the owner's e-mail channel (`imap`: its new UIDs)
or a connector's resource (`resource`) — and remembers what it saw last. When a due time comes
and the thing is as it was, the firing is `skipped: nothing changed` and costs no model tokens;
when it changed, the turn is told what changed (a page's, file's or resource's lines as a diff,
the number of new deliveries, the sender and subject of each new mail). The first check only
records what is there.
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

WATCH_KINDS = ("url", "file", "webhook", "imap", "resource")
# What is remembered of a page or file to show a diff next time, and the diff's size.
MAX_KEPT = 100_000
MAX_DIFF = 4_000
MAX_NEWS = 20  # new mails named in a firing's message (the rest are counted)
UNCHANGED = "nothing changed"
_WEBHOOK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Watch(BaseModel):
    """What a routine watches. `target`: an http(s) URL, a path in the owner's computer
    (relative to its home), a webhook's id, an IMAP folder, or a resource's URI; `via`: the
    e-mail channel an `imap` watch reads through (its id or name; optional when the owner has
    one e-mail channel) or the connector a `resource` watch asks (its name)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["url", "file", "webhook", "imap", "resource"] = Field(
        description=(
            "url: a web page; file: a file in the computer's home; webhook: its deliveries; "
            "imap: new mail in a folder of the owner's e-mail channel; resource: a connector's "
            "resource"
        )
    )
    target: str = Field(
        min_length=1,
        max_length=2_000,
        description=(
            "an http(s) URL, a path relative to the home, a webhook's id, an IMAP folder "
            "(e.g. INBOX or Lists/releases), or a resource's URI"
        ),
        examples=["https://example.com/status"],
    )
    via: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "imap: the e-mail channel to read through (id or name; optional with one e-mail "
            "channel); resource: the connector's name; not used by the other kinds"
        ),
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
        elif self.kind == "imap":
            bad = any(c in self.target for c in '"\\') or not self.target.isprintable()
            if bad or not self.target.isascii() or len(self.target) > 200:
                raise ValueError(
                    "an imap watch needs a folder's name as the mail server spells it (ASCII, "
                    "at most 200 characters, no quotes or backslashes), e.g. INBOX or "
                    "Lists/releases"
                )
        elif self.kind == "resource":
            if ":" not in self.target:
                raise ValueError(
                    "a resource watch needs the resource's URI as its connector lists it, "
                    "e.g. file:///notes/today.md"
                )
            if self.via is None:
                raise ValueError("a resource watch needs via: the connector's name")
        if self.via is not None and self.kind not in ("imap", "resource"):
            raise ValueError(f"a {self.kind} watch takes no via (only imap and resource do)")
        return self

    def describe(self) -> str:
        """In words, for the firing's message and the routine's listing."""
        return {
            "url": f"the page {self.target}",
            "file": f"the file {self.target} in your computer",
            "webhook": f"the webhook {self.target}'s deliveries",
            "imap": f"the mail folder {self.target}",
            "resource": f"the resource {self.target} of the connector {self.via}",
        }[self.kind]


@dataclass(frozen=True)
class Seen:
    """What a check saw: a page's, file's or resource's text, or for a webhook the key of its
    newest delivery (`text`) and how many it has had (`count`, which only words the change:
    old deliveries may be cleaned away). For a mail folder, `text` is its UIDVALIDITY and the
    next UID, `count` that UID, `arrived` how many mails came since the last check and are
    still there, and `news` a line (sender, subject, date) for each of the newest of them.
    `missing`: the file does not exist (yet). `dormant`: why the thing cannot have changed
    and was not looked at (the computer holding the file is asleep)."""

    text: str = ""
    count: int = 0
    missing: bool = False
    arrived: int = 0
    news: tuple[str, ...] = ()
    dormant: str = ""

    def digest(self) -> str:
        return hashlib.sha256(f"{self.missing}:{self.text}".encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """What a check means for the firing: `changed` (run, telling `what`), or not (skip,
    `what` says why); `state` is what to remember for the next check (None: nothing yet)."""

    changed: bool
    what: str
    state: str | None


def judge(watch: Watch, previous: str | None, seen: Seen) -> Verdict:
    """Compare what was seen with what the watch remembered (`previous`, None at first)."""
    if seen.dormant:  # not looked at: what was remembered stands
        return Verdict(False, f"{UNCHANGED}: {seen.dormant}", previous)
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
    if watch.kind == "imap":
        return _mail_verdict(watch, str(before.get("text") or ""), seen, state)
    if seen.missing:
        return Verdict(True, f"{watch.describe()} no longer exists", state)
    return Verdict(True, _diff(str(before.get("text") or ""), seen.text), state)


def folder_position(previous: str | None) -> tuple[str, int] | None:
    """From an imap watch's remembered state: the folder's UIDVALIDITY and the first UID
    not seen yet (None before the first check)."""
    if previous is None:
        return None
    try:
        before = json.loads(previous)
        validity, _ = str(before["text"]).split(":", 1)
        return validity, int(before["count"])
    except (ValueError, KeyError, TypeError):
        return None


def _mail_verdict(watch: Watch, before: str, seen: Seen, state: str) -> Verdict:
    validity, _, _ = seen.text.partition(":")
    if before.partition(":")[0] != validity:
        return Verdict(
            True,
            f"the folder {watch.target} was replaced (its UIDVALIDITY changed): what was in "
            "it before cannot be told apart from what is new",
            state,
        )
    if not seen.arrived:  # mail came and was moved or deleted before this check
        return Verdict(False, f"{UNCHANGED}: what arrived has left the folder again", state)
    head = f"{seen.arrived} new mail(s) in {watch.target}"
    if seen.arrived > len(seen.news):
        head += f" (the newest {len(seen.news)} below)"
    return Verdict(True, "\n".join([head + ":", *(f"- {line}" for line in seen.news)]), state)


def _diff(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), "before", "now", n=1, lineterm=""
    )
    diff = "\n".join(lines)
    if len(diff) > MAX_DIFF:
        diff = diff[:MAX_DIFF] + f"\n[… {len(diff) - MAX_DIFF:,} more characters of the diff]"
    return diff or "(only bytes beyond what is compared changed)"
