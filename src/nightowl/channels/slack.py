"""Slack: a Slack app's bot in the owner's workspace, through the official `slack_sdk`.

Events come two ways, and a channel may use either or both: Socket Mode (`listen`: the app
token opens a websocket from here, so no public URL is needed, the common self-hosting case)
and the Events API over HTTP (`receive_http`, behind `POST /v1/ingress/<channel id>`: every
request's `v0` signature is checked with the app's signing secret and one older than five
minutes is refused). Either way an event's id is Slack's `event_id`, so the router stores a
message once however often and whichever way Slack sent it (Slack retries an event it got no
answer to). A Socket Mode envelope is acknowledged only after its events are stored.

Bolt's `App` is not used: it acknowledges an event before its listeners have stored it (or,
with `process_before_response`, hides the stored events behind its own listener dispatch),
while the seam needs the events back (`listen` hands them to the inbox, `receive_http`
returns them); the SDK's own pieces (`SignatureVerifier`, `SocketModeClient`,
`AsyncWebClient`) do the checking and the transport.

Reactions: only a 👎 (`reaction_added`, `-1` / `thumbsdown`) is read; the inbox makes the
owner's on an agent message a case marked wrong (or, on an open question, its answer).

Conversations: the owner's direct messages with the bot are one direct conversation; each
channel thread is a group conversation (thread key = channel + the thread's first `ts`), where
the agent answers when the message mentions the bot or continues a thread the bot is in.

Effect and trust: the channel posts as the bot into the conversations it came from (replies in
the thread) and uploads files there. What it returns is outside text, except messages and
button presses whose Slack user id is the configured `owner`: Slack vouches for the user id of
a signed request or a Socket Mode envelope, so those are the owner's.

Slack has no idempotency key for a post: each message carries its nightowl id in Slack message
metadata, and before a retry `find_delivered` looks for it in the thread or channel history,
so a crash between the post and its record does not post twice. Files uploaded before such a
crash may be uploaded again (an upload carries no metadata).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from nightowl.channels.base import (
    Accept,
    Capabilities,
    ChannelConfig,
    ChannelError,
    Delivered,
    HttpReply,
    HttpRequest,
    Inbound,
    Outbound,
)
from nightowl.channels.slack_blocks import markdown_mrkdwn, message_blocks
from nightowl.channels.slack_events import (
    MENTION,
    SlackFile,
    SlackMessage,
    button_presses,
    message_of,
    read_body,
    thumbs_down_of,
    verify,
)

T = TypeVar("T")
METADATA_TYPE = "nightowl_message"
MAX_FILE_BYTES = 25 * 1024 * 1024
FALLBACK_CHARS = 3000  # the notification text beside the blocks
SOCKET_CHECK_S = 5.0
SOCKET_DOWN_S = 60.0
MAX_KNOWN_THREADS = 10_000
# Slack error codes that retrying cannot help (the token, the scopes or the conversation).
PERMANENT = {
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "missing_scope",
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "msg_too_long",
    "no_text",
    "invalid_blocks",
    "invalid_arguments",
}


class SlackChannel:
    """A Slack app's bot: the owner's direct messages and the channel threads it is asked in."""

    kind: ClassVar[str] = "slack"
    # Block Kit buttons for questions; the message is built from the agent's markdown and the
    # question's controls (message_blocks), not from the relay's text with its reply hints.
    capabilities: ClassVar[Capabilities] = Capabilities(
        buttons=True, files=True, check_before_retry=True
    )

    def __init__(self, config: ChannelConfig) -> None:
        s = config.settings
        self.api_url = str(s.get("api_url") or "https://slack.com/api/")
        if not self.api_url.startswith(("http://", "https://")):
            raise ChannelError(
                "set api_url to Slack's Web API URL (https://slack.com/api/)", permanent=True
            )
        self.api_url = self.api_url.rstrip("/") + "/"
        owner = s.get("owner") or []
        self.owners = [owner] if isinstance(owner, str) else [str(o) for o in owner]
        if not self.owners or not all(o.startswith(("U", "W")) for o in self.owners):
            raise ChannelError(
                "set owner to your Slack member id (U…: your profile → ⋮ → Copy member ID)",
                permanent=True,
            )
        self._bot_token = config.secret("bot_token_secret")
        if not self._bot_token.startswith("xoxb-"):
            raise ChannelError(
                "bot_token_secret must name the app's bot token (xoxb-…)", permanent=True
            )
        has_app, has_signing = bool(s.get("app_token_secret")), bool(s.get("signing_secret_secret"))
        if not has_app and not has_signing:
            raise ChannelError(
                "set app_token_secret (Socket Mode) or signing_secret_secret (Events API over "
                "HTTP), or both",
                permanent=True,
            )
        self._app_token = config.secret("app_token_secret") if has_app else ""
        if self._app_token and not self._app_token.startswith("xapp-"):
            raise ChannelError(
                "app_token_secret must name an app-level token (xapp-…, connections:write)",
                permanent=True,
            )
        self._signing_secret = config.secret("signing_secret_secret") if has_signing else ""
        self._web = AsyncWebClient(token=self._bot_token, base_url=self.api_url, timeout=30)
        self._bot_user_id = ""
        self._threads: set[tuple[str, str]] = set()  # threads the bot is known to be in

    # -- calls -----------------------------------------------------------------------------

    async def _call(self, call: Awaitable[T]) -> T:
        """A Web API call, its failures as ChannelError (429 → retry_after)."""
        try:
            return await call
        except SlackApiError as error:
            response = error.response
            code = str(response.get("error") or "") if response.data else ""
            if response.status_code == 429:
                headers = {k.lower(): v for k, v in (response.headers or {}).items()}
                after = float(headers.get("retry-after") or 1)
                raise ChannelError("Slack rate limit", retry_after=after) from None
            raise ChannelError(
                f"Slack {response.status_code} {code}", permanent=code in PERMANENT
            ) from None
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as error:
            raise ChannelError(f"Slack: {type(error).__name__}: {error}") from None

    async def _identity(self) -> str:
        """The bot's own user id (auth.test), once."""
        if not self._bot_user_id:
            who = await self._call(self._web.auth_test())
            self._bot_user_id = str(who.get("user_id") or "")
        return self._bot_user_id

    # -- inbound ---------------------------------------------------------------------------

    async def listen(self, position: dict[str, Any], accept: Accept) -> None:
        await self._identity()
        if not self._app_token:  # Events API over HTTP only: the ingress route receives
            await accept([], {})
            await asyncio.Event().wait()
        client = SocketModeClient(app_token=self._app_token, web_client=self._web)
        # The SDK runs each envelope's listener as a task of its own: one at a time, in the
        # order they came (an asyncio lock is first come, first served), so a burst is stored
        # in the order it was written.
        in_order = asyncio.Lock()

        async def on_request(client: SocketModeClient, request: SocketModeRequest) -> None:
            async with in_order:
                events = await self._events_of(request.type, request.payload or {})
                await accept(events, {})  # stored first: one not acknowledged comes again
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id)
            )

        client.socket_mode_request_listeners.append(on_request)  # type: ignore[arg-type]
        try:
            try:
                await client.connect()  # type: ignore[no-untyped-call]
            except SlackApiError as error:
                raise ChannelError(
                    f"Socket Mode refused the app token ({error.response.get('error')})",
                    permanent=True,
                ) from None
            await accept([], {})
            await self._stay_connected(client)
        finally:
            with contextlib.suppress(Exception):
                await client.close()  # type: ignore[no-untyped-call]

    async def _stay_connected(self, client: SocketModeClient) -> None:
        """Return never; raise when the SDK's own reconnecting has failed for a while, so the
        channel shows as failed and the service starts over with a new connection."""
        down_since: float | None = None
        while True:
            await asyncio.sleep(SOCKET_CHECK_S)
            if await client.is_connected():
                down_since = None
            elif down_since is None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since > SOCKET_DOWN_S:
                raise ChannelError(f"Socket Mode disconnected for over {SOCKET_DOWN_S:.0f} s")

    async def receive_http(self, request: HttpRequest) -> tuple[list[Inbound], HttpReply]:
        """An Events API callback or an interaction, once its signature and age are checked."""
        if not self._signing_secret:
            raise ChannelError("this Slack channel has no signing_secret_secret", permanent=True)
        verify(self._signing_secret, request.headers, request.body, time.time())
        payload = read_body(request.headers, request.body)
        if payload.get("type") == "url_verification":
            challenge = json.dumps({"challenge": str(payload.get("challenge", ""))}).encode()
            return [], HttpReply(body=challenge)
        kind = "interactive" if "actions" in payload else "events_api"
        return await self._events_of(kind, payload), HttpReply()

    async def _events_of(self, kind: str, payload: dict[str, Any]) -> list[Inbound]:
        if kind == "interactive":
            return button_presses(payload)
        if kind != "events_api":
            return []
        reaction = thumbs_down_of(payload, await self._identity())
        if reaction is not None:
            return [reaction]
        message = message_of(payload, await self._identity())
        if message is None or not message.event_id:
            return []
        return [await self._inbound(message)]

    async def _inbound(self, message: SlackMessage) -> Inbound:
        direct = message.channel_type == "im"
        addressed = direct or await self._addressed(message)
        files = await self._download(message.files) if addressed else []
        if direct:
            thread_key, address = message.channel, {"channel": message.channel}
        else:
            thread_key = f"{message.channel}:{message.thread_root}"
            address = {"channel": message.channel, "thread_ts": message.thread_root}
        text = message.text
        if message.files and not text:
            text = "(sent a file: " + ", ".join(f.name for f in message.files) + ")"
        return Inbound(
            event_id=message.event_id,
            thread_key=thread_key,
            sender=message.user,
            text=text,
            direct=direct,
            address=address,
            addressed=addressed,
            files=files,
        )

    async def _addressed(self, message: SlackMessage) -> bool:
        """Mentioned, or a reply in a thread the bot is in (it was mentioned there or spoke)."""
        bot = await self._identity()
        thread = (message.channel, message.thread_root)
        if len(self._threads) > MAX_KNOWN_THREADS:  # a cache: asking Slack again is fine
            self._threads.clear()
        if message.mentions(bot):
            self._threads.add(thread)
            return True
        if not message.thread_ts:
            return False
        if thread not in self._threads:
            replies = await self._call(
                self._web.conversations_replies(channel=message.channel, ts=message.thread_ts)
            )
            for m in replies.get("messages") or []:
                if m.get("user") == bot or bot in MENTION.findall(str(m.get("text", ""))):
                    self._threads.add(thread)
                    break
        return thread in self._threads

    def _trusted_url(self, url: str) -> bool:
        """The bot token goes only to Slack's own hosts (the API's host and its subdomains)."""
        host, api_host = urlsplit(url).hostname or "", urlsplit(self.api_url).hostname or ""
        return bool(host) and (host == api_host or host.endswith("." + api_host))

    async def _download(self, files: list[SlackFile]) -> list[tuple[str, str, bytes]]:
        """Files shared with the message, fetched with the bot token (files:read)."""
        got = []
        headers = {"Authorization": f"Bearer {self._bot_token}"}
        async with httpx.AsyncClient(timeout=60, headers=headers) as http:
            for f in files:
                if not self._trusted_url(f.url) or f.size > MAX_FILE_BYTES:
                    continue
                try:
                    response = await http.get(f.url)
                except httpx.HTTPError as error:
                    raise ChannelError(f"Slack file download: {error}") from None
                if response.status_code == 200 and len(response.content) <= MAX_FILE_BYTES:
                    got.append((f.name, f.content_type, response.content))
        return got

    # -- outbound --------------------------------------------------------------------------

    async def deliver(self, outbound: Outbound) -> Delivered:
        channel = str(outbound.address.get("channel") or "")
        if not channel:
            raise ChannelError("this conversation has no Slack channel", permanent=True)
        thread_ts = outbound.address.get("thread_ts") or None
        for name, _, data in outbound.files:
            await self._call(
                self._web.files_upload_v2(
                    channel=channel, thread_ts=thread_ts, file=data, filename=name, title=name
                )
            )
        names = ", ".join(name for name, _, _ in outbound.files)
        body = outbound.markdown.strip() or (f"Attached: {names}" if names else outbound.text)
        posted = await self._call(
            self._web.chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=markdown_mrkdwn(body)[:FALLBACK_CHARS],
                blocks=message_blocks(body, outbound.meta),
                metadata={
                    "event_type": METADATA_TYPE,
                    "event_payload": {"message_id": outbound.message_id},
                },
                unfurl_links=False,
            )
        )
        return Delivered(f"{posted.get('channel') or channel}:{posted.get('ts')}")

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        channel = str(outbound.address.get("channel") or "")
        if not channel:
            return None
        thread_ts = outbound.address.get("thread_ts")
        if thread_ts:
            page = await self._call(
                self._web.conversations_replies(
                    channel=channel, ts=thread_ts, include_all_metadata=True, limit=200
                )
            )
        else:
            page = await self._call(
                self._web.conversations_history(
                    channel=channel, include_all_metadata=True, limit=100
                )
            )
        for message in page.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if (
                metadata.get("event_type") == METADATA_TYPE
                and payload.get("message_id") == outbound.message_id
            ):
                return Delivered(f"{channel}:{message.get('ts')}")
        return None

    async def test(self) -> str:
        try:
            who = await self._web.auth_test()
        except SlackApiError as error:
            raise ChannelError(
                f"Slack refused the bot token ({error.response.get('error')}): put the app's "
                "Bot User OAuth Token (xoxb-…, OAuth & Permissions) in the vault secret "
                "bot_token_secret names",
                permanent=True,
            ) from None
        except (TimeoutError, SlackClientError, aiohttp.ClientError) as error:
            raise ChannelError(f"Slack at {self.api_url} did not answer: {error}") from None
        line = f"Slack {who.get('team')} as {who.get('user')} ({who.get('user_id')}) ok"
        if not self._app_token:
            return line + "; Socket Mode off (events come over HTTP)"
        try:
            await self._web.apps_connections_open(app_token=self._app_token)
        except SlackApiError as error:
            raise ChannelError(
                f"{line}, but Socket Mode refused the app token "
                f"({error.response.get('error')}): turn Socket Mode on (app settings → Socket "
                "Mode) and put an app-level token with connections:write (xapp-…) in the "
                "vault secret app_token_secret names",
                permanent=True,
            ) from None
        return line + "; Socket Mode ok"

    async def close(self) -> None:
        session = getattr(self._web, "session", None)
        if session is not None:
            await session.close()
