"""The browsers a computer host serves: Chromium in a user's sandbox, its DevTools pipe bridged
to one worker's websocket.

A worker's Playwright connects over CDP (`connect_over_cdp`) to the host's websocket route. The
host starts Chromium inside the user's sandbox (its uid, namespaces and network policy, the
profile in its home) with `--remote-debugging-pipe` on descriptors 3 and 4, whose other ends
the host holds, and copies each NUL-terminated message of the pipe to one websocket text message
and back. One Chromium per connection and one connection per user: a new connection (another
worker, or the same one after its browser closed) ends the older one first. When the
connection ends, or before the computer sleeps, Chromium is asked to close (`Browser.close`, so
its profile reaches the disk) with the sandbox held awake, and killed if it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from nightowl.computer.browser_relay import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ENV_INSIDE,
    PROFILE_INSIDE,
    prepare_profile,
)
from nightowl.computer.computers import Computers
from nightowl.computer.sandbox import Sandbox, SandboxError

log = logging.getLogger(__name__)

# What Playwright adds when it launches a headless Chromium itself, and the pipe.
HOSTED_ARGS = [
    *CHROMIUM_ARGS,
    "--headless",
    "--no-sandbox",  # the user's sandbox is the boundary
    "--remote-debugging-pipe",
    f"--user-data-dir={PROFILE_INSIDE}",
    "--window-size=1280,800",
    "--hide-scrollbars",
    "--mute-audio",
    "--password-store=basic",
    "--use-mock-keychain",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-breakpad",
    "--disable-hang-monitor",
    "--disable-popup-blocking",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
    "--force-color-profile=srgb",
    "--no-service-autorun",
    "about:blank",
]
CLOSE_TIMEOUT_S = 10.0
CLOSE_REQUEST = json.dumps({"id": 2**31 - 1, "method": "Browser.close"}).encode() + b"\0"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


@dataclass
class _Bridge:
    """One Chromium and the websocket it answers."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class HostedBrowsers:
    """The users' browsers on this host, each bridged to the worker that connected last."""

    def __init__(self, computers: Computers, close_timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        self.computers = computers
        self.close_timeout_s = close_timeout_s
        self._bridges: dict[str, _Bridge] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def serve(self, user_id: str, sandbox: Sandbox, websocket: WebSocket) -> None:
        """Start Chromium in `sandbox`, accept `websocket` and bridge the two until one ends;
        a Chromium that cannot start is refused with a 409 saying why."""
        async with self._locks.setdefault(user_id, asyncio.Lock()):
            await self.close_user(user_id)  # one browser per user: the older connection ends
            bridge = self._bridges[user_id] = _Bridge()
        try:
            await _run(sandbox, websocket, bridge, lambda: self._kept_awake(user_id))
        finally:
            bridge.ended.set()
            if self._bridges.get(user_id) is bridge:
                del self._bridges[user_id]

    async def close_user(self, user_id: str) -> None:
        """Close the user's browser (its profile flushed) and its connection; call it before
        the computer sleeps."""
        bridge = self._bridges.get(user_id)
        if bridge is None:
            return
        bridge.stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bridge.ended.wait(), self.close_timeout_s * 2)

    async def close(self) -> None:
        """Close every browser (on shutdown)."""
        await asyncio.gather(*(self.close_user(user) for user in list(self._bridges)))

    @contextlib.asynccontextmanager
    async def _kept_awake(self, user_id: str) -> AsyncIterator[None]:
        """The sandbox thawed while Chromium closes (a frozen one could not answer)."""
        holder = f"browser-close:{user_id}"
        try:
            with contextlib.suppress(SandboxError, OSError):
                await self.computers.acquire(user_id, holder)
            yield
        finally:
            await self.computers.release(holder)


async def _run(
    sandbox: Sandbox,
    websocket: WebSocket,
    bridge: _Bridge,
    kept_awake: Callable[[], contextlib.AbstractAsyncContextManager[None]],
) -> None:
    try:
        await prepare_profile(sandbox)
    except Exception as error:
        await _refuse(websocket, f"the browser's profile could not be prepared ({error})")
        return
    to_read, to_write = os.pipe()  # Chromium reads commands on 3
    from_read, from_write = os.pipe()  # and writes answers and events on 4
    null = os.open(os.devnull, os.O_RDWR)
    theirs = [null, to_read, from_write]
    ours = [to_write, from_read]
    try:
        async with sandbox.attached(
            [CHROMIUM, *HOSTED_ARGS], [null, null, null, to_read, from_write], env=ENV_INSIDE
        ) as chromium_status:
            for fd in theirs:
                os.close(fd)  # the sandbox holds them now
            theirs.clear()
            reader, writer = await _pipe_streams(from_read, to_write)
            ours.clear()  # the streams own them now
            try:
                await websocket.accept()
                await _bridge(reader, writer, websocket, chromium_status, bridge, kept_awake)
            finally:
                writer.close()
    except SandboxError as error:
        await _refuse(websocket, f"the browser did not start in the computer ({error})")
    finally:
        for fd in theirs + ours:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(RuntimeError, OSError):
            await websocket.close()


async def _bridge(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    websocket: WebSocket,
    chromium_status: asyncio.StreamReader,
    bridge: _Bridge,
    kept_awake: Callable[[], contextlib.AbstractAsyncContextManager[None]],
) -> None:
    """Copy messages both ways until Chromium exits, the worker leaves or a close is asked;
    then Chromium is asked to close and given time to flush its profile."""
    closing = asyncio.Event()
    exited = asyncio.ensure_future(chromium_status.readline())
    copies = [
        asyncio.ensure_future(_pipe_to_websocket(reader, websocket, closing)),
        asyncio.ensure_future(_websocket_to_pipe(websocket, writer)),
        asyncio.ensure_future(bridge.stop.wait()),
    ]
    try:
        await asyncio.wait([exited, *copies], return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            closing.set()  # Chromium's answer to our close is not the worker's
            copies[1].cancel()
            async with kept_awake():
                with contextlib.suppress(OSError, ConnectionError):
                    writer.write(CLOSE_REQUEST)
                    await writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exited), CLOSE_TIMEOUT_S)
    finally:
        for task in [exited, *copies]:
            task.cancel()
        await asyncio.gather(exited, *copies, return_exceptions=True)


async def _pipe_to_websocket(
    reader: asyncio.StreamReader, websocket: WebSocket, closing: asyncio.Event
) -> None:
    """Chromium's messages, one websocket text message each."""
    buffer = bytearray()
    while True:
        chunk = await reader.read(1 << 20)
        if not chunk:
            return  # Chromium closed its end
        searched = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\0", searched)) >= 0:
            if not closing.is_set():
                await websocket.send_text(buffer[start:end].decode(errors="replace"))
            start = searched = end + 1
        del buffer[:start]
        if len(buffer) > MAX_MESSAGE_BYTES:
            log.warning("browser bridge: a DevTools message over the limit; closing")
            return


async def _websocket_to_pipe(websocket: WebSocket, writer: asyncio.StreamWriter) -> None:
    """The worker's commands, NUL-terminated on Chromium's pipe."""
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        data = text.encode() if text is not None else bytes(message.get("bytes") or b"")
        writer.write(data.replace(b"\0", b"") + b"\0")
        await writer.drain()


async def _pipe_streams(
    read_fd: int, write_fd: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Asyncio streams over our ends of Chromium's two pipes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", buffering=0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _refuse(websocket: WebSocket, why: str) -> None:
    """Answer a connection not yet accepted with a 409 that says why."""
    log.warning("browser refused", extra={"why": why})
    await deny(websocket, 409, {"error": why})


async def deny(websocket: WebSocket, status: int, body: dict[str, str]) -> None:
    """Refuse a websocket before accepting it, with an HTTP answer (a close where the server
    cannot send one)."""
    try:
        await websocket.send_denial_response(JSONResponse(body, status_code=status))
    except RuntimeError:
        await websocket.close(code=1008, reason=next(iter(body.values()))[:120])
