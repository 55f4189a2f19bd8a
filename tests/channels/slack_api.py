"""A local stand-in of Slack's published API, for the Slack channel's tests: the Web API
methods the channel calls (same JSON shapes: `{"ok": false, "error": …}` with HTTP 200 for an
API error, 429 with `Retry-After` for a rate limit), the external file upload, private file
downloads with the bot token, and both ways Slack sends events: Socket Mode (an
`apps.connections.open` URL on 127.0.0.1, `hello`, envelopes acknowledged by `envelope_id`)
and the Events API / interactivity over HTTP, signed `v0` with the app's signing secret.

It runs in a thread of the test process (aiohttp on a free 127.0.0.1 port), so it outlives a
killed server. `hold` keeps the answer to chat.postMessage back while set (the message is
already stored): the window a crash test kills the server in. Only what the channel uses is
here; real Slack does much more (and was not reached from this machine).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from tests.server import free_port

TEAM = {"id": "T0NIGHTOWL", "name": "Nightowl Test", "domain": "nightowl-test"}
BOT = "U0BOT"
OWNER = "U0OWNER"
ALICE = "U0ALICE"
GENERAL = "C0GENERAL"
OWNER_DM = "D0OWNER"
RESENDS = 3  # Slack sends an unacknowledged envelope again, up to three times
RESEND_AFTER_S = 1.0  # (after a few seconds on real Slack; shorter here)


class SlackStandIn:
    """Slack's Web API, file hosting and event delivery for one workspace, on 127.0.0.1."""

    bot_token = "xoxb-0000-standin-bot-token"
    app_token = "xapp-1-A0APP-standin-app-token"
    signing_secret = "standin-signing-secret-0123456789abcdef"

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api/"
        self.events_url = ""  # where HTTP events and interactions go (the ingress URL)
        self.channels: dict[str, dict[str, Any]] = {
            GENERAL: {"type": "channel", "messages": []},
            OWNER_DM: {"type": "im", "messages": []},
        }
        self.files: dict[str, dict[str, Any]] = {}
        self.timed_calls: list[tuple[str, float]] = []  # Web API methods called, and when
        self.hold = threading.Event()  # while set, chat.postMessage's answer waits
        self.rate_limit_posts = 0  # answer this many next chat.postMessage calls with 429
        self.acked: set[str] = set()  # Socket Mode envelope ids acknowledged
        self.lose_acks = 0  # treat this many next acknowledgements as lost (Slack resends)
        self.envelopes_sent: list[tuple[str, int]] = []  # (envelope id, retry_attempt)
        self._sockets: list[web.WebSocketResponse] = []
        self._ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- running ---------------------------------------------------------------------------

    def start(self) -> SlackStandIn:
        self._thread.start()
        self._run(self._start())
        return self

    def stop(self) -> None:
        self.hold.clear()
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self, coroutine: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{file_id}/{name}", self._download)
        app.router.add_get("/link/", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _ts(self) -> str:
        return f"{int(time.time())}.{next(self._ids):06d}"

    # -- the Web API -----------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        token = str(args.pop("token", "") or token)
        self.timed_calls.append((method, time.monotonic()))
        wanted = self.app_token if method == "apps.connections.open" else self.bot_token
        if not token:
            return _error("not_authed")
        if token != wanted:
            return _error("invalid_auth")
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return _error("unknown_method")
        answer: web.Response = await handler(args)
        return answer

    async def _auth_test(self, args: dict[str, Any]) -> web.Response:
        return _ok(
            url=f"https://{TEAM['domain']}.slack.com/",
            team=TEAM["name"],
            user="nightowl",
            team_id=TEAM["id"],
            user_id=BOT,
            bot_id="B0BOT",
            is_enterprise_install=False,
        )

    async def _apps_connections_open(self, args: dict[str, Any]) -> web.Response:
        return _ok(url=f"ws://127.0.0.1:{self.port}/link/?ticket={self._id('tk')}")

    async def _chat_postMessage(self, args: dict[str, Any]) -> web.Response:
        if self.rate_limit_posts > 0:
            self.rate_limit_posts -= 1
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        channel = self.channels.get(str(args.get("channel")))
        if channel is None:
            return _error("channel_not_found")
        blocks = _json(args.get("blocks")) or []
        if not args.get("text") and not blocks:
            return _error("no_text")
        message: dict[str, Any] = {
            "type": "message",
            "user": BOT,
            "bot_id": "B0BOT",
            "text": str(args.get("text") or ""),
            "ts": self._ts(),
            "blocks": blocks,
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        metadata = _json(args.get("metadata"))
        if metadata:
            message["metadata"] = metadata
        channel["messages"].append(message)
        while self.hold.is_set():  # stored; the answer waits
            await asyncio.sleep(0.05)
        return _ok(channel=args["channel"], ts=message["ts"], message=_shown(message, True))

    async def _conversations_history(self, args: dict[str, Any]) -> web.Response:
        channel = self.channels.get(str(args.get("channel")))
        if channel is None:
            return _error("channel_not_found")
        metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        top = [m for m in channel["messages"] if m.get("thread_ts", m["ts"]) == m["ts"]]
        limit = int(args.get("limit") or 100)
        page = [_shown(m, metadata) for m in reversed(top)][:limit]
        return _ok(messages=page, has_more=len(top) > limit)

    async def _conversations_replies(self, args: dict[str, Any]) -> web.Response:
        channel = self.channels.get(str(args.get("channel")))
        if channel is None:
            return _error("channel_not_found")
        root = str(args.get("ts") or "")
        thread = [m for m in channel["messages"] if m["ts"] == root or m.get("thread_ts") == root]
        if not thread:
            return _error("thread_not_found")
        metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        return _ok(messages=[_shown(m, metadata) for m in thread], has_more=False)

    async def _files_getUploadURLExternal(self, args: dict[str, Any]) -> web.Response:
        if not args.get("filename") or not args.get("length"):
            return _error("invalid_arguments")
        file_id = self._id("F")
        self.files[file_id] = {"name": str(args["filename"]), "data": None}
        return _ok(upload_url=f"{self.url}/upload/{file_id}", file_id=file_id)

    async def _upload(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return web.Response(status=404, text="not found")
        found["data"] = await request.read()
        return web.Response(text=f"OK - {len(found['data'])}")

    async def _files_completeUploadExternal(self, args: dict[str, Any]) -> web.Response:
        listed = _json(args.get("files")) or []
        channel = self.channels.get(str(args.get("channel_id")))
        if channel is None:
            return _error("channel_not_found")
        shared = []
        for item in listed:
            stored = self.files.get(str(item.get("id")))
            if stored is None or stored["data"] is None:
                return _error("file_not_found")
            shared.append(self._file_object(str(item["id"]), str(item.get("title") or "")))
        message: dict[str, Any] = {
            "type": "message",
            "subtype": "file_share",
            "user": BOT,
            "bot_id": "B0BOT",
            "text": str(args.get("initial_comment") or ""),
            "ts": self._ts(),
            "files": shared,
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        channel["messages"].append(message)
        return _ok(files=[{"id": f["id"], "title": f["title"]} for f in shared])

    async def _files_info(self, args: dict[str, Any]) -> web.Response:
        if str(args.get("file")) not in self.files:
            return _error("file_not_found")
        return _ok(file=self._file_object(str(args["file"]), ""))

    def _file_object(self, file_id: str, title: str) -> dict[str, Any]:
        stored = self.files[file_id]
        name = stored["name"]
        return {
            "id": file_id,
            "name": name,
            "title": title or name,
            "mimetype": stored.get("mimetype", "application/octet-stream"),
            "size": len(stored["data"] or b""),
            "url_private": f"{self.url}/files-pri/{file_id}/{name}",
            "url_private_download": f"{self.url}/files-pri/{file_id}/{name}",
        }

    async def _download(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        found = self.files.get(request.match_info["file_id"])
        if token != self.bot_token:  # Slack answers a sign-in page, not the file
            return web.Response(status=302, headers={"Location": "https://slack.com/signin"})
        if found is None or found["data"] is None:
            return web.Response(status=404)
        return web.Response(body=found["data"], content_type=found.get("mimetype"))

    # -- Socket Mode -----------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.append(socket)
        await socket.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "standin", "approximate_connection_time": 18060},
                "connection_info": {"app_id": "A0APP"},
            }
        )
        try:
            async for frame in socket:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    envelope_id = json.loads(frame.data).get("envelope_id")
                    if envelope_id and self.lose_acks > 0:
                        self.lose_acks -= 1
                    elif envelope_id:
                        self.acked.add(str(envelope_id))
        finally:
            self._sockets.remove(socket)
        return socket

    def sockets(self) -> int:
        """How many Socket Mode connections are open."""
        return len(self._sockets)

    async def _envelope(self, kind: str, payload: dict[str, Any]) -> str:
        envelope_id = self._id("env-")
        await self._send_envelope(envelope_id, kind, payload, 0)
        return envelope_id

    async def _send_envelope(
        self, envelope_id: str, kind: str, payload: dict[str, Any], attempt: int
    ) -> None:
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": False,
            "retry_attempt": attempt,
            "retry_reason": "timeout" if attempt else "",
        }
        await self._sockets[-1].send_json(envelope)  # Slack picks one of the connections
        self.envelopes_sent.append((envelope_id, attempt))
        if attempt < RESENDS:  # no acknowledgement in time: Slack sends it again
            self._loop.call_later(
                RESEND_AFTER_S,
                lambda: asyncio.ensure_future(
                    self._resend(envelope_id, kind, payload, attempt + 1)
                ),
            )

    async def _resend(
        self, envelope_id: str, kind: str, payload: dict[str, Any], attempt: int
    ) -> None:
        if envelope_id not in self.acked and self._sockets:
            await self._send_envelope(envelope_id, kind, payload, attempt)

    def refresh_connections(self) -> None:
        """Ask every Socket Mode client to reconnect, as Slack does every few hours."""

        async def refresh() -> None:
            for socket in list(self._sockets):
                await socket.send_json(
                    {"type": "disconnect", "reason": "refresh_requested", "debug_info": {}}
                )

        self._run(refresh())

    # -- what people do (called by the tests) ----------------------------------------------

    def say(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str = "",
        file: tuple[str, str, bytes] | None = None,
        via: tuple[str, ...] = ("socket",),
    ) -> dict[str, Any]:
        """A person posts a message; Slack sends its event the ways in `via` ("socket",
        "http"), the same event id each way. The event callback payload, with `statuses`
        (the HTTP answers) and `envelopes` (Socket Mode envelope ids)."""
        return dict(self._run(self._say(user, channel, text, thread_ts, file, via)))

    def say_burst(self, user: str, channel: str, texts: list[str], thread_ts: str) -> None:
        """A person posts several messages into a thread at once: their envelopes go out
        back to back over Socket Mode, with nothing in between."""

        async def burst() -> None:
            for text in texts:
                await self._say(user, channel, text, thread_ts, None, ("socket",))

        self._run(burst())

    async def _say(
        self,
        user: str,
        channel: str,
        text: str,
        thread_ts: str,
        file: tuple[str, str, bytes] | None,
        via: tuple[str, ...],
    ) -> dict[str, Any]:
        ts = self._ts()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": self.channels[channel]["type"],
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if file is not None:
            file_id = self._id("F")
            self.files[file_id] = {"name": file[0], "mimetype": file[1], "data": file[2]}
            event["subtype"] = "file_share"
            event["files"] = [self._file_object(file_id, file[0])]
        self.channels[channel]["messages"].append(
            {k: v for k, v in event.items() if k not in ("channel", "channel_type", "event_ts")}
        )
        payload = {
            "token": "legacy-verification-token",
            "team_id": TEAM["id"],
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": self._id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM["id"], "user_id": BOT, "is_bot": True}],
        }
        return {**payload, **await self._send("events_api", payload, via)}

    def react(
        self, user: str, channel: str, ts: str, name: str, via: tuple[str, ...] = ("http",)
    ) -> dict[str, Any]:
        """A person adds the reaction `name` (Slack's short name: `-1`, `thumbsdown`, …) to
        the message `ts`; Slack sends `reaction_added` (the `reactions:read` scope and the
        event subscription) the ways in `via`."""
        return dict(self._run(self._react(user, channel, ts, name, via)))

    async def _react(
        self, user: str, channel: str, ts: str, name: str, via: tuple[str, ...]
    ) -> dict[str, Any]:
        [message] = [m for m in self.channels[channel]["messages"] if m["ts"] == ts]
        event = {
            "type": "reaction_added",
            "user": user,
            "reaction": name,
            "item_user": message.get("user", ""),
            "item": {"type": "message", "channel": channel, "ts": ts},
            "event_ts": self._ts(),
        }
        payload = {
            "token": "legacy-verification-token",
            "team_id": TEAM["id"],
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": self._id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM["id"], "user_id": BOT, "is_bot": True}],
        }
        return {**payload, **await self._send("events_api", payload, via)}

    def click(self, user: str, channel: str, ts: str, label: str, via: str = "http") -> int:
        """A person presses the button labelled `label` on the message `ts`; the HTTP
        status nightowl answered (or 200 once a Socket Mode envelope is sent)."""
        return int(self._run(self._click(user, channel, ts, label, via)))

    async def _click(self, user: str, channel: str, ts: str, label: str, via: str) -> int:
        [message] = [m for m in self.channels[channel]["messages"] if m["ts"] == ts]
        [button] = [
            e
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for e in block["elements"]
            if e["text"]["text"] == label
        ]
        payload = {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": user.lower(),
                "name": user.lower(),
                "team_id": TEAM["id"],
            },
            "api_app_id": "A0APP",
            "token": "legacy-verification-token",
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "trigger_id": self._id("trg."),
            "team": TEAM,
            "channel": {"id": channel, "name": channel.lower()},
            "message": _shown(message, False),
            "actions": [
                {
                    "action_id": button["action_id"],
                    "block_id": "nightowl_answer",
                    "text": button["text"],
                    "value": button["value"],
                    "type": "button",
                    "action_ts": self._ts(),
                }
            ],
        }
        sent = await self._send("interactive", payload, (via,))
        return int((sent["statuses"] or [200])[0])

    async def _send(
        self, kind: str, payload: dict[str, Any], via: tuple[str, ...]
    ) -> dict[str, Any]:
        statuses, envelopes = [], []
        for way in via:
            if way == "socket":
                envelopes.append(await self._envelope(kind, payload))
            else:
                statuses.append((await self._post_http(kind, payload))[0])
        return {"statuses": statuses, "envelopes": envelopes}

    async def _post_http(self, kind: str, payload: dict[str, Any], **forge: Any) -> tuple[int, str]:
        if kind == "interactive":
            body = urlencode({"payload": json.dumps(payload)}).encode()
            content_type = "application/x-www-form-urlencoded"
        else:
            body, content_type = json.dumps(payload).encode(), "application/json"
        stamp = str(forge.get("timestamp") or int(time.time()))
        secret = forge.get("secret") or self.signing_secret
        signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": str(signature),
        }
        if forge.get("retry"):  # Slack sends an event again when it got no 200 in 3 s
            headers["X-Slack-Retry-Num"] = str(forge["retry"])
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.events_url, data=body, headers=headers) as response,
        ):
            return response.status, await response.text()

    def post_http(self, payload: dict[str, Any], **forge: Any) -> tuple[int, str]:
        """Send a payload to the events URL as Slack would (`retry=n`: as its n-th retry), or
        forged (`secret=`, a wrong signing secret; `timestamp=`, an old one); nightowl's
        status and body."""
        kind = "interactive" if payload.get("type") == "block_actions" else "events_api"
        return tuple(self._run(self._post_http(kind, payload, **forge)))  # type: ignore[return-value]

    @property
    def calls(self) -> list[str]:
        """The Web API methods called, in order."""
        return [method for method, _ in self.timed_calls]

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """Every message in the channel, thread replies included, oldest first."""
        return [dict(m) for m in self.channels[channel]["messages"]]

    def from_bot(self, channel: str) -> list[dict[str, Any]]:
        """The bot's messages in the channel, oldest first."""
        return [m for m in self.messages(channel) if m.get("user") == BOT]


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields})


def _error(code: str) -> web.Response:
    return web.json_response({"ok": False, "error": code})  # Slack answers 200 with ok false


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _shown(message: dict[str, Any], metadata: bool) -> dict[str, Any]:
    """A message as the API shows it (metadata only when asked for)."""
    return {k: v for k, v in message.items() if metadata or k != "metadata"}
