"""Bytes both ways between a websocket and a stream (the live view's RFB stream): the API
server's bridge from the owner's viewer, and a computer host's from a worker."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

from starlette.websockets import WebSocket, WebSocketDisconnect

EndedBy = Literal["viewer", "server", "stopped"]


async def relay(
    websocket: WebSocket,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    stop: asyncio.Event | None = None,
) -> EndedBy:
    """Copy bytes both ways until one side ends or `stop` is set: which ended it ("viewer":
    the websocket's side, "server": the stream's, "stopped")."""

    async def from_viewer() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") or (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()

    async def to_viewer() -> None:
        while data := await reader.read(65536):
            await websocket.send_bytes(data)

    viewer = asyncio.create_task(from_viewer())
    server = asyncio.create_task(to_viewer())
    stopped = asyncio.create_task((stop or asyncio.Event()).wait())
    done, pending = await asyncio.wait(
        {viewer, server, stopped}, return_when=asyncio.FIRST_COMPLETED
    )
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, OSError):
            await task
    for task in done:
        error = task.exception()
        if error is not None and not isinstance(
            error, WebSocketDisconnect | OSError | RuntimeError
        ):
            raise error
    if stopped in done:
        return "stopped"
    return "server" if server in done and viewer not in done else "viewer"
