"""What Slack sends, checked and read: a request's `v0` signature and timestamp, and an Events
API callback (a message, or a 👎 `reaction_added`) or a `block_actions` interaction as
`Inbound` events.

The same payloads arrive over HTTP (the Events API and the interactivity request URL) and
inside Socket Mode envelopes, so both ways share this module: an event's id is Slack's own
`event_id` either way, and the router stores it once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier

from nightowl.channels.base import ChannelError, Inbound

STALE_AFTER_S = 5 * 60  # Slack's advice: refuse a request older than five minutes (replays)
# Message subtypes that are someone's words; the rest (joins, topic changes, edits,
# deletions, the bot's own posts) are not messages to the agent.
SPOKEN = {None, "", "file_share", "thread_broadcast"}
MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
# Slack's names for the thumbs-down reaction (a skin tone comes after `::`).
THUMBS_DOWN_NAMES = {"-1", "thumbsdown"}


def verify(signing_secret: str, headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Refuse a request Slack did not sign with the app's signing secret, or signed more than
    five minutes ago (raises ChannelError, permanent)."""
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not stamp or not signature:
        raise ChannelError("not signed by Slack (no X-Slack-Signature)", permanent=True)
    try:
        age = abs(now - int(stamp))
    except ValueError:
        raise ChannelError("a malformed X-Slack-Request-Timestamp", permanent=True) from None
    if age > STALE_AFTER_S:
        raise ChannelError(
            f"a stale Slack request ({int(age)} s old; more than 5 minutes is refused)",
            permanent=True,
        )
    verifier = SignatureVerifier(signing_secret)
    if not verifier.is_valid(body=body, timestamp=stamp, signature=signature):
        raise ChannelError("a forged Slack request (the signature does not match)", permanent=True)


def read_body(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The request's payload: JSON (events) or a form's `payload` field (interactions)."""
    try:
        if "application/x-www-form-urlencoded" in headers.get("content-type", ""):
            form = parse_qs(body.decode("utf-8"))
            return dict(json.loads(form["payload"][0]))
        return dict(json.loads(body))
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        raise ChannelError("not a Slack event or interaction payload", permanent=True) from None


@dataclass(frozen=True)
class SlackFile:
    """A file a message shared: fetched with the bot token before it becomes an event."""

    name: str
    content_type: str
    url: str
    size: int


@dataclass(frozen=True)
class SlackMessage:
    """A message event, read: what the channel needs to decide and to fetch."""

    event_id: str
    channel: str
    channel_type: str
    user: str
    text: str
    ts: str
    thread_ts: str
    files: list[SlackFile]

    @property
    def thread_root(self) -> str:
        """The thread's first message (a top-level message starts its own thread)."""
        return self.thread_ts or self.ts

    def mentions(self, user_id: str) -> bool:
        """Whether the message mentions this user (`<@U…>`)."""
        return user_id in MENTION.findall(self.text)


def message_of(payload: dict[str, Any], bot_user_id: str) -> SlackMessage | None:
    """The Events API callback's message, or None when it is not someone's message (another
    event type, a subtype such as an edit, or the bot's own post)."""
    if payload.get("type") != "event_callback":
        return None
    event = payload.get("event") or {}
    # `message` events only: an `app_mention` is the same message again under another id.
    if event.get("type") != "message":
        return None
    if event.get("subtype") not in SPOKEN or event.get("bot_id"):
        return None
    user = str(event.get("user") or "")
    if not user or user == bot_user_id:
        return None
    files = [
        SlackFile(
            str(f.get("name") or "file"),
            str(f.get("mimetype") or ""),
            str(f.get("url_private_download") or f.get("url_private") or ""),
            int(f.get("size") or 0),
        )
        for f in event.get("files") or []
        if isinstance(f, dict)
    ]
    return SlackMessage(
        event_id=str(payload.get("event_id") or ""),
        channel=str(event.get("channel") or ""),
        channel_type=str(event.get("channel_type") or ""),
        user=user,
        text=str(event.get("text") or ""),
        ts=str(event.get("ts") or ""),
        thread_ts=str(event.get("thread_ts") or ""),
        files=files,
    )


def button_presses(payload: dict[str, Any]) -> list[Inbound]:
    """A `block_actions` interaction on one of the channel's buttons, as answer events: the
    message's `channel:ts` id and the answer the button's value stands for."""
    if payload.get("type") != "block_actions":
        return []
    container = payload.get("container") or {}
    channel = str(container.get("channel_id") or (payload.get("channel") or {}).get("id") or "")
    message_ts = str(container.get("message_ts") or (payload.get("message") or {}).get("ts") or "")
    user = payload.get("user") or {}
    presses = []
    for action in payload.get("actions") or []:
        if not str(action.get("action_id", "")).startswith("nightowl_answer"):
            continue
        try:
            answer = json.loads(str(action.get("value") or ""))
        except ValueError:
            continue
        if not isinstance(answer, dict):
            continue
        presses.append(
            Inbound(
                event_id=f"action:{channel}:{message_ts}:{action.get('action_ts', '')}",
                thread_key=channel,
                sender=str(user.get("id") or ""),
                text="",
                direct=True,
                sender_name=str(user.get("username") or user.get("name") or ""),
                reaction_to=f"{channel}:{message_ts}",
                answer=answer,
            )
        )
    return presses


def thumbs_down_of(payload: dict[str, Any], bot_user_id: str) -> Inbound | None:
    """A `reaction_added` callback of a 👎 on a message, as a reaction to that message's
    `channel:ts` id (the id its delivery was recorded under); None for anything else (another
    reaction, a reaction to a file, the bot's own). On a message whose question is still
    open the inbox takes it as an answer (deny, discard), as on Matrix; other reactions are
    not read (Slack's questions have buttons)."""
    if payload.get("type") != "event_callback":
        return None
    event = payload.get("event") or {}
    if event.get("type") != "reaction_added":
        return None
    name = str(event.get("reaction") or "").split("::", 1)[0]
    item = event.get("item") or {}
    user = str(event.get("user") or "")
    channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
    if name not in THUMBS_DOWN_NAMES or item.get("type") != "message" or not channel or not ts:
        return None
    if not user or user == bot_user_id or not payload.get("event_id"):
        return None
    return Inbound(
        event_id=str(payload["event_id"]),
        thread_key=channel,
        sender=user,
        text="\U0001f44e",
        direct=True,
        reaction_to=f"{channel}:{ts}",
    )
