"""Matrix: a bot account on any homeserver, over the client-server API (plain HTTP).

Sync is a long poll from a stored `since` token, so a restart neither loses nor repeats an
event (and the router drops an event id it has seen). A room with the bot and one other
person is a direct conversation; any other room is a group conversation where the bot answers
only when addressed (mentioned by id or name). Invitations are accepted from the owner only.
Messages go out with a transaction id derived from the nightowl message id (the homeserver
drops a repeat) and carry that id in their content, so a retry after a crash first looks for
it in the room. Unencrypted rooms only (no end-to-end encryption).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from nightowl.channels.base import (
    Accept,
    Capabilities,
    ChannelConfig,
    ChannelError,
    Delivered,
    Inbound,
    Outbound,
    is_owner,
)
from nightowl.channels.render import markdown_html

API = "/_matrix/client/v3"
MARK = "org.nightowl.message_id"
FILE_KINDS = ("m.file", "m.image", "m.audio", "m.video")
MAX_FILE_BYTES = 25 * 1024 * 1024


class MatrixChannel:
    """A Matrix bot account the owner talks to in a direct room (and others in group rooms)."""

    kind: ClassVar[str] = "matrix"
    # Questions are answered by a reply or a reaction (Matrix's buttons are reactions).
    capabilities: ClassVar[Capabilities] = Capabilities(
        buttons=True, reactions=True, files=True, html=True, check_before_retry=True
    )

    def __init__(self, config: ChannelConfig) -> None:
        s = config.settings
        self.homeserver = str(s.get("homeserver") or "").rstrip("/")
        if not self.homeserver.startswith(("http://", "https://")):
            raise ChannelError("set homeserver to the homeserver's URL", permanent=True)
        self.user_id = str(s.get("user_id") or "")
        if not self.user_id.startswith("@"):
            raise ChannelError("set user_id to the bot's Matrix id (@bot:server)", permanent=True)
        owner = s.get("owner") or []
        self.owners = [owner] if isinstance(owner, str) else [str(o) for o in owner]
        self.sync_timeout_ms = int(s.get("sync_timeout_ms") or 25_000)
        self._token = config.secret("access_token_secret")
        self._http = httpx.AsyncClient(
            base_url=self.homeserver,
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=httpx.Timeout(30.0, read=self.sync_timeout_ms / 1000 + 30),
        )
        self._members: dict[str, int] = {}
        self._names = {self.user_id.lower(), self.user_id[1:].split(":")[0].lower()}

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ChannelError(f"Matrix: {type(error).__name__}: {error}") from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code == 429:
            retry_ms = body.get("retry_after_ms") or 1000
            raise ChannelError("Matrix rate limit", retry_after=float(retry_ms) / 1000)
        if response.status_code >= 400:
            permanent = response.status_code in (400, 401, 403, 404)
            raise ChannelError(
                f"Matrix {response.status_code} {body.get('errcode', '')}: "
                f"{body.get('error', response.text[:200])}",
                permanent=permanent,
            )
        return body if isinstance(body, dict) else {}

    # -- inbound ---------------------------------------------------------------------------

    async def _sync(self, since: str | None, timeout_ms: int) -> dict[str, Any]:
        params: dict[str, Any] = {"timeout": timeout_ms}
        if since:
            params["since"] = since
        else:  # first start: from now on, no history
            params["filter"] = json.dumps({"room": {"timeline": {"limit": 0}}})
        return await self._call("GET", f"{API}/sync", params=params)

    async def listen(self, position: dict[str, Any], accept: Accept) -> None:
        since = position.get("since")
        if not since:
            first = await self._sync(None, 0)
            since = first["next_batch"]
            await self._join_invites(first)
            await accept([], {"since": since})
        while True:
            batch = await self._sync(since, self.sync_timeout_ms)
            await self._join_invites(batch)
            events = await self._events(batch)
            since = batch["next_batch"]
            await accept(events, {"since": since})

    async def _join_invites(self, batch: dict[str, Any]) -> None:
        for room_id, room in (batch.get("rooms", {}).get("invite") or {}).items():
            inviter = next(
                (
                    e.get("sender", "")
                    for e in room.get("invite_state", {}).get("events", [])
                    if e.get("type") == "m.room.member" and e.get("state_key") == self.user_id
                ),
                "",
            )
            if is_owner(inviter, self.owners):
                await self._call("POST", f"{API}/rooms/{quote(room_id)}/join", json={})
            else:
                with contextlib.suppress(ChannelError):
                    await self._call("POST", f"{API}/rooms/{quote(room_id)}/leave", json={})

    async def _member_count(self, room_id: str, summary: dict[str, Any]) -> int:
        if "m.joined_member_count" in summary:
            self._members[room_id] = int(summary["m.joined_member_count"])
        if room_id not in self._members:
            joined = await self._call("GET", f"{API}/rooms/{quote(room_id)}/joined_members")
            self._members[room_id] = len(joined.get("joined") or {})
        return self._members[room_id]

    def _addressed(self, content: dict[str, Any]) -> bool:
        mentions = content.get("m.mentions") or {}
        if self.user_id in (mentions.get("user_ids") or []):
            return True
        text = str(content.get("body", "")).lower()
        return any(name in text for name in self._names)

    async def _events(self, batch: dict[str, Any]) -> list[Inbound]:
        found = []
        for room_id, room in (batch.get("rooms", {}).get("join") or {}).items():
            timeline = room.get("timeline", {}).get("events", [])
            if any(e.get("type") == "m.room.member" for e in timeline):
                self._members.pop(room_id, None)  # someone came or went: count again
            for event in timeline:
                if event.get("sender") == self.user_id:
                    continue
                if event.get("type") == "m.reaction":
                    reaction = _reaction(event, room_id)
                    if reaction is not None:
                        found.append(reaction)
                    continue
                if event.get("type") != "m.room.message":
                    continue
                content = event.get("content") or {}
                members = await self._member_count(room_id, room.get("summary") or {})
                direct = members <= 2
                addressed = direct or self._addressed(content)
                files = await self._download(content) if addressed else []
                found.append(
                    Inbound(
                        event_id=str(event["event_id"]),
                        thread_key=room_id,
                        sender=str(event.get("sender", "")),
                        text=_text_of(content),
                        direct=direct,
                        address={"room_id": room_id},
                        addressed=addressed,
                        files=files,
                    )
                )
        return found

    async def _download(self, content: dict[str, Any]) -> list[tuple[str, str, bytes]]:
        """The file a message carries (mxc://server/id), fetched from the homeserver."""
        url = str(content.get("url") or "")
        if content.get("msgtype") not in FILE_KINDS or not url.startswith("mxc://"):
            return []
        server, _, media = url.removeprefix("mxc://").partition("/")
        path = f"/_matrix/client/v1/media/download/{quote(server)}/{quote(media)}"
        try:
            response = await self._http.get(path)
        except httpx.HTTPError as error:
            raise ChannelError(f"Matrix media download: {error}") from None
        if response.status_code != 200 or len(response.content) > MAX_FILE_BYTES:
            return []
        info = content.get("info") or {}
        return [
            (str(content.get("body") or "file"), str(info.get("mimetype") or ""), response.content)
        ]

    # -- outbound --------------------------------------------------------------------------

    async def _send(self, room_id: str, txn: str, content: dict[str, Any]) -> str:
        path = f"{API}/rooms/{quote(room_id)}/send/m.room.message/{quote(txn)}"
        sent = await self._call("PUT", path, json=content)
        return str(sent.get("event_id", ""))

    async def deliver(self, outbound: Outbound) -> Delivered:
        room_id = outbound.address.get("room_id")
        if not room_id:
            raise ChannelError("this conversation has no Matrix room", permanent=True)
        for n, (name, content_type, data) in enumerate(outbound.files):
            uploaded = await self._call(
                "POST",
                "/_matrix/media/v3/upload",
                params={"filename": name},
                content=data,
                headers={"Content-Type": content_type or "application/octet-stream"},
            )
            kind = "m.image" if content_type.startswith("image/") else "m.file"
            await self._send(
                room_id,
                f"nw-{outbound.message_id}-f{n}",
                {
                    "msgtype": kind,
                    "body": name,
                    "url": uploaded["content_uri"],
                    "info": {"mimetype": content_type, "size": len(data)},
                    MARK: f"{outbound.message_id}/f{n}",
                },
            )
        event_id = await self._send(
            room_id,
            f"nw-{outbound.message_id}",
            {
                "msgtype": "m.text",
                "body": outbound.text,
                "format": "org.matrix.custom.html",
                "formatted_body": markdown_html(outbound.text),
                MARK: outbound.message_id,
            },
        )
        return Delivered(event_id)

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        room_id = outbound.address.get("room_id")
        if not room_id:
            return None
        page = await self._call(
            "GET",
            f"{API}/rooms/{quote(room_id)}/messages",
            params={
                "dir": "b",
                "limit": 100,
                "filter": json.dumps({"senders": [self.user_id], "types": ["m.room.message"]}),
            },
        )
        for event in page.get("chunk") or []:
            if (event.get("content") or {}).get(MARK) == outbound.message_id:
                return Delivered(str(event.get("event_id")))
        return None

    async def test(self) -> str:
        who = await self._call("GET", f"{API}/account/whoami")
        if who.get("user_id") != self.user_id:
            raise ChannelError(
                f"the access token belongs to {who.get('user_id')}, not {self.user_id}",
                permanent=True,
            )
        return f"Matrix {self.user_id} on {self.homeserver} ok"

    async def close(self) -> None:
        await self._http.aclose()


def _text_of(content: dict[str, Any]) -> str:
    """A message's text; a file or image says what was sent."""
    kind = content.get("msgtype")
    body = str(content.get("body", ""))
    if kind in FILE_KINDS:
        return f"(sent a file: {body})"
    return body


def _reaction(event: dict[str, Any], room_id: str) -> Inbound | None:
    """A reaction (`m.annotation`) as an event that may answer the question it reacts to, or
    (a 👎) mark the agent's reply it reacts to wrong."""
    relates = (event.get("content") or {}).get("m.relates_to") or {}
    if relates.get("rel_type") != "m.annotation" or not relates.get("event_id"):
        return None
    return Inbound(
        event_id=str(event["event_id"]),
        thread_key=room_id,
        sender=str(event.get("sender", "")),
        text=str(relates.get("key", "")),
        direct=True,
        address={"room_id": room_id},
        reaction_to=str(relates["event_id"]),
    )
