"""Runs the configured channels in this process: one listener task per channel (restarted
with backoff when it fails, resuming from its stored position) and the outbound relay, woken
by the change feed the moment the agent writes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightowl.channels.base import (
    Channel,
    ChannelConfig,
    ChannelError,
    HttpIngress,
    HttpReply,
    HttpRequest,
    Inbound,
)
from nightowl.channels.inbound import ChannelInbox, FileDrop
from nightowl.channels.relay import OutboundRelay, backoff_s
from nightowl.router.router import Router
from nightowl.safety.vault import open_secrets
from nightowl.store.changes import ChangeFeed
from nightowl.store.channels import (
    ChannelInfo,
    claim_listener,
    get_channel,
    list_channels,
    release_listener,
    set_status,
)
from nightowl.store.database import Database
from nightowl.store.errors import NotFound

log = logging.getLogger(__name__)

ChannelFactory = Callable[[ChannelConfig], Channel]


def channel_kinds() -> dict[str, ChannelFactory]:
    """Every channel module, by kind."""
    from nightowl.channels.email import EmailChannel
    from nightowl.channels.matrix import MatrixChannel
    from nightowl.channels.slack import SlackChannel
    from nightowl.channels.telegram import TelegramChannel

    return {
        "email": EmailChannel,
        "matrix": MatrixChannel,
        "slack": SlackChannel,
        "telegram": TelegramChannel,
    }


def takes_http(kind: str) -> bool:
    """Whether channels of this kind take events at the public ingress."""
    factory = channel_kinds().get(kind)
    return isinstance(factory, type) and issubclass(factory, HttpIngress)


def build_channel(info: ChannelInfo, secrets: dict[str, str]) -> Channel:
    """The channel module's object for a configured channel."""
    factory = channel_kinds().get(info.kind)
    if factory is None:
        raise ChannelError(f"no channel of kind {info.kind!r}", permanent=True)
    return factory(ChannelConfig(info.id, info.name, info.owner_id, info.settings, secrets))


@dataclass(frozen=True)
class ChannelRuntime:
    """What the channels need from the server's settings."""

    vault_key: bytes
    blob_dir: Path
    homes_dir: Path | None
    public_url: str
    reload_s: float = 2.0
    relay_poll_s: float = 1.0
    # One worker listens on a channel at a time: its lease is renewed at every reload, and a
    # dead worker's lapses after `listener_lease_s` (another takes the channel then).
    worker_id: str = "worker"
    listener_lease_s: float = 15.0
    lease_s: float = 60.0
    max_backoff_s: float = 60.0
    # The computers are on a tier: received files are written into them there.
    file_drop: FileDrop | None = None


class NoIngress(LookupError):
    """The channel does not exist, or takes no events over HTTP."""


def _fingerprint(info: ChannelInfo, secrets: dict[str, str]) -> str:
    """What a channel object is built from (its settings and the secrets they name): when it
    changes, the object is built again."""
    wanted = {k: secrets.get(str(v), "") for k, v in info.settings.items() if k.endswith("_secret")}
    return hashlib.sha256(json.dumps([info.settings, wanted], sort_keys=True).encode()).hexdigest()


@dataclass
class _Running:
    channel: Channel
    fingerprint: str
    task: asyncio.Task[None]


class ChannelService:
    """Keeps a listener running per configured channel and relays the agent's messages."""

    def __init__(
        self, database: Database, router: Router, changes: ChangeFeed, runtime: ChannelRuntime
    ) -> None:
        self._database = database
        self._inbox = ChannelInbox(
            database, router, runtime.homes_dir, runtime.vault_key, runtime.file_drop
        )
        self._changes = changes
        self._runtime = runtime
        self._running: dict[str, _Running] = {}
        self._ingress: dict[str, tuple[str, Channel]] = {}  # built for HTTP ingress only
        self._ingress_lock = asyncio.Lock()
        self.relay = OutboundRelay(
            database,
            lambda: {cid: r.channel for cid, r in self._running.items()},
            runtime.blob_dir,
            self.web_link,
            lease_s=runtime.lease_s,
            max_backoff_s=runtime.max_backoff_s,
        )

    def web_link(self, conversation_id: str) -> str:
        """Where the owner opens the conversation in the web app."""
        return f"{self._runtime.public_url.rstrip('/')}/#c={conversation_id}"

    def _configured(self) -> list[tuple[ChannelInfo, dict[str, str], str]]:
        """The channels this worker listens on (it holds or took their lease), with their
        secrets and a fingerprint of both."""
        found = []
        with self._database.write() as session:
            for info in list_channels(session):
                worker, lease = self._runtime.worker_id, self._runtime.listener_lease_s
                if not claim_listener(session, info.id, worker, lease):
                    continue  # another worker listens on it
                secrets = open_secrets(session, self._runtime.vault_key, info.owner_id)
                found.append((info, secrets, _fingerprint(info, secrets)))
        return found

    def _for_ingress(self, channel_id: str) -> tuple[ChannelInfo, dict[str, str]]:
        with self._database.read() as session:
            try:
                info = get_channel(session, channel_id)
            except NotFound:
                raise NoIngress(f"no channel {channel_id!r}") from None
            return info, open_secrets(session, self._runtime.vault_key, info.owner_id)

    async def _built_for_ingress(
        self, info: ChannelInfo, secrets: dict[str, str], fingerprint: str
    ) -> Channel:
        async with self._ingress_lock:
            cached = self._ingress.get(info.id)
            if cached is not None and cached[0] == fingerprint:
                return cached[1]
            if cached is not None:
                with contextlib.suppress(Exception):
                    await cached[1].close()
                del self._ingress[info.id]
            try:
                channel = build_channel(info, secrets)
            except ChannelError as error:
                # The owner sees why (status, doctor); the caller is not told the settings.
                await asyncio.to_thread(self._set_status, info.id, "failed", str(error))
                raise ChannelError("the channel is not set up right; its owner is told") from None
            self._ingress[info.id] = (fingerprint, channel)
            return channel

    async def receive_http(self, channel_id: str, request: HttpRequest) -> HttpReply:
        """A request to the channel's public ingress: the channel verifies and parses it, its
        events are stored like a listener's (moving no position), and its reply is answered.
        Any worker or API process can take it: the object is this process's own (the
        listener's where it runs here), built again when the settings or secrets change."""
        info, secrets = await asyncio.to_thread(self._for_ingress, channel_id)
        if not takes_http(info.kind):
            raise NoIngress(f"a {info.kind} channel takes no events over HTTP")
        fingerprint = _fingerprint(info, secrets)
        running = self._running.get(channel_id)
        if running is not None and running.fingerprint == fingerprint:
            channel: Channel = running.channel
        else:
            channel = await self._built_for_ingress(info, secrets, fingerprint)
        if not isinstance(channel, HttpIngress):  # its class does (takes_http): for mypy
            raise NoIngress(f"a {info.kind} channel takes no events over HTTP")
        events, reply = await channel.receive_http(request)
        if events:
            await self._inbox.accept(info, events, None)
        return reply

    async def reconcile(self) -> None:
        """Start listeners of new or changed channels, stop those of removed ones."""
        configured = await asyncio.to_thread(self._configured)
        wanted = {info.id for info, _, _ in configured}
        for channel_id in [c for c in self._running if c not in wanted]:
            await self._stop(channel_id)
        for info, secrets, fingerprint in configured:
            running = self._running.get(info.id)
            if running is not None and running.fingerprint == fingerprint:
                continue
            if running is not None:
                await self._stop(info.id)
            try:
                channel = build_channel(info, secrets)
            except ChannelError as error:
                await asyncio.to_thread(self._set_status, info.id, "failed", str(error))
                continue
            task = asyncio.create_task(self._listen(info.id, channel), name=f"channel-{info.name}")
            self._running[info.id] = _Running(channel, fingerprint, task)

    async def _stop(self, channel_id: str) -> None:
        running = self._running.pop(channel_id)
        running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running.task
        with contextlib.suppress(Exception):
            await running.channel.close()

    def _set_status(self, channel_id: str, status: str, error: str = "") -> None:
        with self._database.write() as session:
            set_status(session, channel_id, status, error)

    def _info(self, channel_id: str) -> ChannelInfo:
        with self._database.read() as session:
            return get_channel(session, channel_id)

    async def _listen(self, channel_id: str, channel: Channel) -> None:
        failures = 0
        while True:
            info = await asyncio.to_thread(self._info, channel_id)

            async def accept(
                events: list[Inbound], position: dict[str, Any], info: ChannelInfo = info
            ) -> None:
                await self._inbox.accept(info, events, position)

            try:
                await channel.listen(info.position, accept)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure of the channel: report, back off, resume
                failures += 1
                log.warning(
                    "channel listener failed",
                    extra={"channel": info.name, "error": f"{type(error).__name__}: {error}"},
                )
                await asyncio.to_thread(
                    self._set_status, channel_id, "failed", f"{type(error).__name__}: {error}"
                )
                # The same channel object listens again: it reconnects (deliveries share it).
                await asyncio.sleep(backoff_s(failures, self._runtime.max_backoff_s))

    async def run(self) -> None:
        """Until cancelled: keep listeners in step with the configuration, relay messages."""
        reload = asyncio.create_task(self._reload_forever())
        try:
            with self._changes.subscription() as changes:
                while True:
                    try:
                        # Nothing to relay through without a channel: no store writes on
                        # every change (planning catches up by each binding's mark later).
                        if self._running:
                            await self.relay.run_once()
                    except Exception:  # the store is briefly away: try again at the next poll
                        log.exception("channel relay pass failed")
                    await changes.next(self._runtime.relay_poll_s)
        finally:
            reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reload
            for channel_id in list(self._running):
                await self._stop(channel_id)
                with contextlib.suppress(Exception):  # else the lease lapses
                    await asyncio.to_thread(self._release, channel_id)
            for _, channel in self._ingress.values():
                with contextlib.suppress(Exception):
                    await channel.close()
            self._ingress.clear()

    def _release(self, channel_id: str) -> None:
        with self._database.write() as session:
            release_listener(session, channel_id, self._runtime.worker_id)

    async def _reload_forever(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception:
                log.exception("channel reload failed")
            await asyncio.sleep(self._runtime.reload_s)


async def test_channel(info: ChannelInfo, secrets: dict[str, str]) -> str:
    """Connect with the channel's settings and credentials; what was reached."""
    channel = build_channel(info, secrets)
    try:
        return await channel.test()
    finally:
        with contextlib.suppress(Exception):
            await channel.close()
