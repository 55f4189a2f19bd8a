"""The channel seam: what a channel (e-mail, Matrix, …) is to the rest of nightowl.

A channel is one module with one class that implements `Channel`:

- `listen(position, inbox)` runs until cancelled, hands each batch of inbound events to the
  inbox together with the position to resume from after them (the inbox stores the position
  only after the events are stored, so a restart neither loses nor repeats one);
- `deliver(outbound)` puts one agent message on the channel, idempotent by the nightowl
  message id where the channel allows it; `find_delivered(outbound)` answers, before a retry
  that may repeat an earlier attempt, whether the channel already has it;
- `capabilities` says what the channel can show; `test()` checks the credentials;
- a channel the service pushes to over HTTP (Slack's Events API, a Telegram webhook) also
  implements `HttpIngress`: the public route `POST /v1/ingress/{channel id}` (api/ingress.py)
  hands it each request to verify and parse.

Channels talk to the router and the store (through `ChannelInbox` and the relay), never to
the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True)
class Capabilities:
    """What a channel can show beyond text."""

    buttons: bool = False  # native buttons (or reactions) answer questions
    reactions: bool = False  # reactions answer questions: the text says which (render.py)
    files: bool = False
    drafts: bool = False  # an editable draft in place
    edits: bool = False
    typing: bool = False
    html: bool = False  # markdown is rendered as HTML
    check_before_retry: bool = False  # find_delivered can tell whether an attempt landed


@dataclass(frozen=True)
class Inbound:
    """One event from a channel: a mail, a chat message."""

    event_id: str  # the channel's own id: the router's dedupe key
    thread_key: str  # the channel's thread (room id, first Message-ID): one conversation
    sender: str  # the external identity (address, Matrix user id)
    text: str
    direct: bool  # a 1:1 chat with the channel's owner identity, or a group/thread
    title: str = ""
    # Where replies go (room id; To, Subject and the Message-ID to answer).
    address: dict[str, Any] = field(default_factory=dict)
    refs: list[str] = field(default_factory=list)  # external ids that thread it (References)
    addressed: bool = True  # in a group: whether the agent was addressed
    sender_name: str = ""
    files: list[tuple[str, str, bytes]] = field(default_factory=list)  # name, type, bytes
    # The channel vouches for the sender (a homeserver's user id; a mail's DKIM signature of
    # the sender's domain): only then can the sender count as the owner.
    verified: bool = True
    # A reaction (its key in `text`) to the channel's event with this id: it can answer the
    # question that event asked, and is never a message of its own.
    reaction_to: str = ""
    # A button pressed on the channel's event `reaction_to`: the answer it stands for
    # ({"value": …} for a question or an approval, {"action": "send"|"discard"} for a draft).
    # It answers only the owner's, and only the question that very event still asks.
    answer: dict[str, Any] | None = None


@dataclass(frozen=True)
class Outbound:
    """One agent message to put on a channel."""

    message_id: str  # nightowl's id: the idempotency key on the channel
    conversation_id: str
    text: str  # markdown, with the controls and the web link rendered in (see render.py)
    markdown: str  # the agent's text alone
    meta: dict[str, Any]
    address: dict[str, Any]
    files: list[tuple[str, str, bytes]] = field(default_factory=list)  # name, type, bytes


@dataclass(frozen=True)
class Delivered:
    """The channel has the message: its own id for it, and what the thread's address learnt
    (a mail's Message-ID to answer next)."""

    external_id: str | None = None
    address: dict[str, Any] = field(default_factory=dict)


class ChannelError(Exception):
    """A channel refused or failed; `retry_after` when it said when to come back (a rate
    limit), `permanent` when retrying cannot help (a bad address)."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


Accept = Callable[[list[Inbound], dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class HttpRequest:
    """One request to a channel's public ingress, as it came (nothing checked yet)."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    query: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class HttpReply:
    """What the ingress answers the service."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@runtime_checkable
class HttpIngress(Protocol):
    """A channel whose service pushes events to a public URL."""

    async def receive_http(self, request: HttpRequest) -> tuple[list[Inbound], HttpReply]:
        """Verify the request (signature, secret token, timestamp) and parse it: the events
        to store and what to answer. Raise ChannelError(permanent=True) for a request that is
        not authentic (answered 401 with the message), ChannelError for a passing problem
        (503: the service sends it again)."""
        ...


class Channel(Protocol):
    """A surface the owner reaches the agent on."""

    kind: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    async def listen(self, position: dict[str, Any], accept: Accept) -> None:
        """Receive events from `position` on, forever; `accept(events, next_position)`
        stores them and then the position."""
        ...

    async def deliver(self, outbound: Outbound) -> Delivered:
        """Put the message on the channel (raise ChannelError when it cannot)."""
        ...

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        """Whether an earlier attempt already put this message on the channel."""
        ...

    async def test(self) -> str:
        """Check the connection and credentials; a line saying what was reached."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class ChannelConfig:
    """What a channel module is built from: its settings and its opened secrets."""

    channel_id: str
    name: str
    owner_id: str
    settings: dict[str, Any]
    secrets: dict[str, str]

    def secret(self, setting: str) -> str:
        """The vault secret a setting names (e.g. `password_secret`), opened."""
        name = str(self.settings.get(setting) or "")
        if not name:
            raise ChannelError(f"set {setting} to the name of a vault secret", permanent=True)
        if name not in self.secrets:
            raise ChannelError(
                f"the vault has no secret named {name!r} (nightowl secrets set {name})",
                permanent=True,
            )
        return self.secrets[name]


def is_owner(identity: str, owners: list[str]) -> bool:
    """Whether an external identity is one the owner configured as theirs."""
    return identity.strip().lower() in {o.strip().lower() for o in owners if o}
