"""What a routine's watch sees (the comparison is harness/watches.py): a page fetched through
the same address checks as `web_fetch`, a file read from the owner's computer, a webhook's
deliveries counted in the store, a folder of the owner's e-mail channel examined over IMAP, a
connector's resource read through its MCP session. No model is involved.

What a page, a file, a mail's header or a resource says is outside content: the firing that
reports its change hands it to the turn as outside text (engine/routine_firings.py), never as
the owner's words.

Checks run in the routine's firing thread; what needs an event loop (a fetch, a connector, a
computer on a host) runs on one loop the checks keep for the life of the process, so the
clients that belong to a loop are made once, not at every firing.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from nightowl.channels.base import ChannelError
from nightowl.channels.email import EmailChannel
from nightowl.channels.service import build_channel
from nightowl.computer.errors import SandboxError
from nightowl.computer.protocol import ComputerPool
from nightowl.harness.watches import MAX_NEWS, Seen, Watch, folder_position
from nightowl.safety.vault import open_secrets
from nightowl.store.channels import get_channel
from nightowl.store.computers import computer_state
from nightowl.store.connectors import get_connector
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.webhooks import deliveries_of
from nightowl.tools.mcp.connections import CallScope, Connections, ConnectorError
from nightowl.tools.pinned_fetch import FetchFailed, FetchRefused, PinnedFetcher
from nightowl.tools.web import page_text

MAX_FILE_BYTES = 5_000_000
CHECK_TIMEOUT_S = 420.0  # a connector may start its server and wake the computer first
ASLEEP = "the computer is asleep (nothing in it runs until it wakes)"
_T = TypeVar("_T")


class WatchFailed(Exception):
    """The check could not be made (the page did not answer, the path leaves the home): the
    firing fails with this reason."""


class _LoopThread:
    """One event loop in a thread of its own, started on first use, for the checks' async
    work."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, work: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="nightowl-watches", daemon=True
                ).start()
            loop = self._loop
        future = asyncio.run_coroutine_threadsafe(work, loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()  # the work stops (and lets go of the computer it holds)
            raise

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)


class WatchChecks:
    """Makes a watch's check for an owner.

    `vault_key` opens the owner's secrets (an e-mail channel's password); `computers` is where
    the owner's files live (on this server or on a computer tier) and where a stdio connector
    runs; `connections` reaches connectors. A check whose part is missing fails with why.
    """

    def __init__(
        self,
        database: Database,
        homes_dir: Path,
        fetcher: PinnedFetcher,
        *,
        vault_key: bytes | None = None,
        computers: ComputerPool | None = None,
        connections: Connections | None = None,
    ) -> None:
        self._database = database
        self._homes = homes_dir
        self._fetcher = fetcher
        self._vault_key = vault_key
        self._computers = computers
        self._connections = connections
        self._loop = _LoopThread()

    def see(self, owner_id: str, watch: Watch, previous: str | None = None) -> Seen:
        """What the watched thing is now (`previous`: what the watch remembered, which an
        imap check starts from); WatchFailed when it cannot be seen."""
        if watch.kind == "url":
            return self._page(watch.target)
        if watch.kind == "file":
            return self._file(owner_id, watch.target)
        if watch.kind == "imap":
            return self._folder(owner_id, watch, previous)
        if watch.kind == "resource":
            return self._resource(owner_id, watch)
        return self._deliveries(watch.target)

    def close(self) -> None:
        self._loop.close()

    def _page(self, url: str) -> Seen:
        try:
            page = self._loop.run(self._fetcher.get(url), CHECK_TIMEOUT_S)
        except (FetchRefused, FetchFailed) as error:
            raise WatchFailed(f"{url} could not be checked: {error}") from error
        if page.status >= 400:
            raise WatchFailed(f"{url} answered HTTP {page.status}")
        return Seen(text=page_text(page.text(), page.content_type))

    # -- files -------------------------------------------------------------------------------

    def _file(self, owner_id: str, relative: str) -> Seen:
        with self._database.read() as session:
            state = computer_state(session, owner_id)
        if state == "asleep":  # its home is in a snapshot: nothing can have changed it
            return Seen(dormant=ASLEEP)
        computers = self._computers
        if computers is not None and not computers.homes_here:  # on a computer tier
            return self._loop.run(
                self._file_on_host(computers, owner_id, relative), CHECK_TIMEOUT_S
            )
        return self._file_here(owner_id, relative)

    def _file_here(self, owner_id: str, relative: str) -> Seen:
        home = (self._homes / owner_id).resolve()
        path = (home / relative).resolve()
        if not path.is_relative_to(home):  # a link that leads out of the home
            raise WatchFailed(f"{relative} leads outside the computer's home")
        if not path.exists():
            return Seen(missing=True)
        if not path.is_file():
            raise WatchFailed(f"{relative} is not a file")
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise WatchFailed(f"{relative} is larger than {MAX_FILE_BYTES:,} bytes")
        return Seen(text=data.decode("utf-8", "replace"))

    async def _file_on_host(self, computers: ComputerPool, owner_id: str, relative: str) -> Seen:
        """The file read inside the owner's computer on its host, as the computer's user (a
        link leads only where the computer itself could read)."""
        holder = f"watch-{secrets.token_hex(8)}"
        request = {"op": "read", "path": relative, "encoding": "base64", "limit": MAX_FILE_BYTES}
        try:
            sandbox = await computers.acquire(owner_id, holder)
            answer = await sandbox.call(request, timeout_s=120)
        except SandboxError as error:
            if str(error).startswith("FileNotFoundError"):
                return Seen(missing=True)
            raise WatchFailed(f"{relative} could not be read: {error}") from error
        finally:
            await computers.release(holder)
        if answer.get("too_big"):
            raise WatchFailed(f"{relative} is larger than {MAX_FILE_BYTES:,} bytes")
        data = base64.b64decode(str(answer.get("base64", "")))
        return Seen(text=data.decode("utf-8", "replace"))

    # -- webhooks, mail, connectors ----------------------------------------------------------

    def _deliveries(self, hook_id: str) -> Seen:
        with self._database.read() as session:
            count, newest = deliveries_of(session, hook_id)
        return Seen(text=newest, count=count)

    def _folder(self, owner_id: str, watch: Watch, previous: str | None) -> Seen:
        if self._vault_key is None:
            raise WatchFailed("this server keeps no secrets, so it cannot log in to a mailbox")
        with self._database.read() as session:
            try:
                info = get_channel(session, watch.via or "")
            except NotFound:
                info = None
            if info is None or info.owner_id != owner_id or info.kind != "email":
                raise WatchFailed(f"the e-mail channel {watch.via} is gone")
            secrets_ = open_secrets(session, self._vault_key, owner_id)
        try:
            channel = build_channel(info, secrets_)
            assert isinstance(channel, EmailChannel)
            validity, uid_next, arrived, news = channel.folder_news(
                watch.target, folder_position(previous), MAX_NEWS
            )
        except ChannelError as error:
            raise WatchFailed(f"{watch.target} could not be checked: {error}") from error
        return Seen(
            text=f"{validity}:{uid_next}", count=uid_next, arrived=arrived, news=tuple(news)
        )

    def _resource(self, owner_id: str, watch: Watch) -> Seen:
        if self._connections is None:
            raise WatchFailed("this server reaches no connectors")
        with self._database.read() as session:
            try:
                connector = get_connector(session, owner_id, watch.via or "")
            except NotFound:
                raise WatchFailed(f"the connector {watch.via} is gone") from None
        return self._loop.run(self._read_resource(owner_id, connector, watch), CHECK_TIMEOUT_S)

    async def _read_resource(self, owner_id: str, connector: Any, watch: Watch) -> Seen:
        assert self._connections is not None
        holder = f"watch-{secrets.token_hex(8)}"
        computers = self._computers if connector.transport == "stdio" else None
        if connector.transport == "stdio" and computers is None:
            raise WatchFailed(f"{watch.via} runs in a computer, and this server has none")
        try:
            sandbox = await computers.acquire(owner_id, holder) if computers else None
            text = await self._connections.read_resource(
                connector, sandbox, CallScope(owner_id), watch.target
            )
        except (ConnectorError, SandboxError) as error:
            raise WatchFailed(f"{watch.target} could not be read: {error}") from error
        finally:
            if computers is not None:
                await computers.release(holder)
        return Seen(text=text)
