"""Web Push to the installed web app: VAPID keys (RFC 8292), encrypted payloads (RFC 8291,
aes128gcm) and the sender that delivers the pushes the store decided (store/push.py).

Encryption and the VAPID signature come from `pywebpush` and `py-vapid`; the HTTP request is
ours (httpx), so the sender sees every answer: 201 is sent, 404/410 forget the device, 429 and
5xx come back after Retry-After or a backoff. A push carries no message text unless its owner
opts in: the push service is a third party.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid02

from nightowl.store.changes import ChangeFeed
from nightowl.store.database import Database
from nightowl.store.inbox import still_waiting
from nightowl.store.push import (
    DuePush,
    claim_due,
    forget_device,
    hold_until,
    mark_done,
    mark_sent,
    quiet_until,
    retry_later,
    settings_of,
)
from nightowl.store.tables import utcnow

log = logging.getLogger(__name__)
KEY_FILE = "vapid-private.pem"
MAX_ATTEMPTS = 8
MAX_BACKOFF_S = 300.0
TITLES = {
    "approval": "nightowl needs your approval",
    "question": "nightowl needs you",
    "draft": "nightowl needs you",
    "failed_turn": "nightowl stopped",
    "update": "nightowl has news",
}


class VapidKeys:
    """The server's VAPID key pair, made at first start and kept in the data dir (0600)."""

    def __init__(self, vapid: Vapid02) -> None:
        self.vapid = vapid

    @classmethod
    def load_or_create(cls, data_dir: Path) -> VapidKeys:
        """The kept key pair, or a new one written with mode 0600."""
        path = data_dir / KEY_FILE
        if path.exists():
            return cls(Vapid02.from_pem(path.read_bytes()))
        vapid = Vapid02()
        vapid.generate_keys()
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(vapid.private_pem())
        return cls(vapid)

    @property
    def public_key(self) -> str:
        """The browser's `applicationServerKey`: the raw public point, base64url."""
        raw = self.vapid.public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def authorization(self, endpoint: str, subject: str, lifetime_s: int = 12 * 3600) -> str:
        """The `Authorization: vapid t=…, k=…` header for a push to `endpoint`."""
        parts = urlsplit(endpoint)
        claims = {
            "aud": f"{parts.scheme}://{parts.netloc}",
            "exp": int(time.time()) + lifetime_s,
            "sub": subject,
        }
        return str(self.vapid.sign(claims)["Authorization"])


@dataclass(frozen=True)
class PushOptions:
    """How the sender behaves: who it says it is, how long a push waits, how often it looks."""

    subject: str
    delay_s: float = 0.0  # a push waits this long: an item answered meanwhile never buzzes
    poll_s: float = 1.0


def payload_of(due: DuePush, include_text: bool) -> dict[str, Any]:
    """What the device shows: no message text unless the owner opted in."""
    title = due.conversation_title or "a conversation"
    body = title
    if include_text:
        body = f"{title}: {' '.join(due.body.split())[:200]}"
    return {
        "title": TITLES.get(due.kind, "nightowl needs you"),
        "body": body,
        "url": f"/#c={due.conversation_id}&m={due.message_id}",
        "tag": due.message_id,
        "kind": due.kind,
        "urgent": due.urgent,
    }


def encrypt(due: DuePush, payload: dict[str, Any]) -> bytes:
    """The payload encrypted for the device (RFC 8291, aes128gcm)."""
    from pywebpush import WebPusher  # with aiohttp: imported at the first push, not at start

    subscription = {
        "endpoint": due.subscription.endpoint,
        "keys": {"p256dh": due.subscription.p256dh, "auth": due.subscription.auth},
    }
    data = json.dumps(payload).encode()
    return bytes(WebPusher(subscription).encode(data, "aes128gcm")["body"])


def retry_after(response: httpx.Response, attempts: int) -> float:
    """Seconds to wait before the next attempt: the push service's Retry-After, or a backoff."""
    given = response.headers.get("Retry-After", "").strip()
    if given.isdigit():
        return min(float(given), 3600.0)
    if given:
        try:
            return max(0.0, (parsedate_to_datetime(given) - utcnow()).total_seconds())
        except (TypeError, ValueError):
            pass
    return float(min(MAX_BACKOFF_S, 2.0**attempts))


class PushSender:
    """Sends due pushes, once per item and device, until the server stops."""

    def __init__(
        self,
        database: Database,
        changes: ChangeFeed,
        keys: VapidKeys,
        options: PushOptions,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.database = database
        self.changes = changes
        self.keys = keys
        self.options = options
        self.http = http or httpx.AsyncClient(timeout=15.0, follow_redirects=False)

    async def run(self) -> None:
        """Look for due pushes when a message brought some (`Change.pushed`: deliveries are
        planned with the message), and every `poll_s` in between (a push held back by the
        delay or quiet hours, a retry). Other changes (every message that deserves no push, a
        turn's activity at every step, a read mark) wake nothing: each was a write
        transaction on the store's pool, two or more per turn."""
        loop = asyncio.get_running_loop()
        try:
            with self.changes.subscription() as feed:
                while True:
                    try:
                        await self.send_due()
                    except Exception:
                        log.exception("push sender: a round failed; trying again")
                    deadline = loop.time() + self.options.poll_s
                    while (left := deadline - loop.time()) > 0:
                        change = await feed.next(left)
                        if change is None or change.pushed:
                            break
        finally:
            await self.http.aclose()

    async def send_due(self) -> int:
        """Send what is due now; how many were claimed."""
        now = utcnow()
        before = now - timedelta(seconds=self.options.delay_s)

        def claim() -> list[DuePush]:
            with self.database.write() as session:
                return claim_due(session, now, before)

        due = await asyncio.to_thread(claim)
        await asyncio.gather(*(self._deliver(push) for push in due))
        return len(due)

    async def _deliver(self, due: DuePush) -> None:
        def look() -> tuple[bool, Any]:
            with self.database.read() as session:
                return still_waiting(session, due.message_id), settings_of(session, due.user_id)

        waiting, settings = await asyncio.to_thread(look)
        if not waiting:
            await self._write(mark_done, due.key, "dropped", "answered or read before the push")
            return
        quiet = None if due.urgent else quiet_until(settings, utcnow())
        if quiet is not None:
            await self._write(hold_until, due.key, quiet)
            return
        try:
            response = await self._post(due, payload_of(due, settings.include_text))
        except httpx.HTTPError as error:
            await self._again(due, float(min(MAX_BACKOFF_S, 2.0**due.attempts)), str(error))
            return
        status = response.status_code
        if status in (200, 201, 202):
            await self._write(mark_sent, due.key, due.subscription.id)
            log.info("push sent", extra={"message_id": due.message_id})
        elif status in (404, 410):
            await self._write(forget_device, due.subscription.id)
            log.info("push subscription gone; forgotten", extra={"status": status})
        elif status == 429 or status >= 500:
            await self._again(due, retry_after(response, due.attempts), f"HTTP {status}")
        else:
            await self._write(mark_done, due.key, "failed", f"HTTP {status}: {response.text[:300]}")
            log.warning("push refused", extra={"status": status})

    async def _post(self, due: DuePush, payload: dict[str, Any]) -> httpx.Response:
        body = await asyncio.to_thread(encrypt, due, payload)
        endpoint = due.subscription.endpoint
        headers = {
            "Authorization": self.keys.authorization(endpoint, self.options.subject),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "TTL": "86400",
            "Urgency": "high" if due.urgent else "normal",
            # One topic per item: a push the device has not fetched yet is replaced, not doubled.
            "Topic": base64.urlsafe_b64encode(
                hashlib.sha256(due.message_id.encode()).digest()
            ).decode()[:32],
        }
        return await self.http.post(endpoint, content=body, headers=headers)

    async def _again(self, due: DuePush, wait_s: float, error: str) -> None:
        if due.attempts + 1 >= MAX_ATTEMPTS:
            await self._write(mark_done, due.key, "failed", f"gave up: {error}")
            return
        at = utcnow() + timedelta(seconds=wait_s)
        await self._write(retry_later, due.key, at, error)

    async def _write(self, change: Any, *args: Any) -> None:
        def write() -> None:
            with self.database.write() as session:
                change(session, *args)

        await asyncio.to_thread(write)


def check_endpoint(endpoint: str, allow_http: bool) -> str | None:
    """Why a push endpoint is refused (push services speak HTTPS), or None."""
    parts = urlsplit(endpoint)
    if parts.scheme == "https" and parts.netloc:
        return None
    if parts.scheme == "http" and parts.netloc and allow_http:
        return None
    return "endpoint must be an https:// URL of a push service"
