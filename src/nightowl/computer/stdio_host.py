"""A command's stdio inside a user's sandbox, served by a computer host on a websocket: how a
worker runs an MCP server in the computer (tools/mcp/remote_stdio.py is the other end).

The worker's first message names the command (`{"argv": [...], "env": {...}}`); the host
starts it inside the sandbox with our ends of three socket pairs as its stdin, stdout and
stderr, then every later message from the worker is one line of its stdin, and the host sends
`o` + each line of its stdout, `e` + each line of its stderr, and `x` + a JSON object when it
has ended (`{"exit": code}`, or `{"error": why}` when it could not start). When the worker
goes, the request closes and the supervisor kills the command's whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from nightowl.computer.sandbox import Sandbox, SandboxError

MAX_LINE_BYTES = 16 * 1024 * 1024
START_TIMEOUT_S = 30.0


def _command(first: Any) -> tuple[list[str], dict[str, str]]:
    """The argv and env of the worker's first message (ValueError when malformed)."""
    request = json.loads(first)
    argv, env = request.get("argv"), request.get("env") or {}
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("env must map strings to strings")
    return argv, env


async def serve_stdio(sandbox: Sandbox, websocket: WebSocket) -> None:
    """Run the command the (accepted) websocket names inside `sandbox` and bridge its stdio
    until either ends."""
    try:
        first = await asyncio.wait_for(websocket.receive_text(), START_TIMEOUT_S)
        argv, env = _command(first)
    except (TimeoutError, ValueError, WebSocketDisconnect, KeyError) as error:
        await _end(websocket, {"error": f"name the command first: {error}"})
        return
    pairs = [socket.socketpair() for _ in range(3)]  # stdin, stdout, stderr
    ours = [ours for ours, _ in pairs]
    theirs = [theirs for _, theirs in pairs]
    try:
        async with sandbox.attached(argv, [s.fileno() for s in theirs], env=env) as ended:
            for sock in theirs:
                sock.close()  # the supervisor holds them now
            await _bridge(websocket, ours, ended)
    except SandboxError as error:
        await _end(websocket, {"error": f"the command did not start in the computer ({error})"})
    finally:
        for sock in (*ours, *theirs):
            with contextlib.suppress(OSError):
                sock.close()


async def _bridge(
    websocket: WebSocket, ours: list[socket.socket], ended: asyncio.StreamReader
) -> None:
    # Keep every StreamWriter referenced: a collected one closes its socket.
    _, stdin = await asyncio.open_connection(sock=ours[0])
    stdout, out_writer = await asyncio.open_connection(sock=ours[1], limit=MAX_LINE_BYTES)
    stderr, err_writer = await asyncio.open_connection(sock=ours[2], limit=MAX_LINE_BYTES)

    async def lines_of(reader: asyncio.StreamReader, tag: str) -> None:
        while line := await reader.readline():
            await websocket.send_text(tag + line.decode(errors="replace").rstrip("\n"))

    async def to_stdin() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text") or (message.get("bytes") or b"").decode()
            stdin.write(text.replace("\n", " ").encode() + b"\n")
            await stdin.drain()

    outputs = [
        asyncio.ensure_future(lines_of(stdout, "o")),
        asyncio.ensure_future(lines_of(stderr, "e")),
    ]
    exited = asyncio.ensure_future(ended.readline())
    worker = asyncio.ensure_future(to_stdin())
    try:
        await asyncio.wait([exited, worker], return_when=asyncio.FIRST_COMPLETED)
        if exited.done() and not worker.done():
            # Its last words on stdout and stderr first, then how it ended.
            await asyncio.wait(outputs, timeout=1.0)
            status = json.loads(exited.result() or b'{"error": "the computer stopped"}')
            await _end(websocket, status)
    finally:
        for task in (*outputs, exited, worker):
            task.cancel()
        await asyncio.gather(*outputs, exited, worker, return_exceptions=True)
        for writer in (stdin, out_writer, err_writer):
            with contextlib.suppress(OSError):
                writer.close()


async def _end(websocket: WebSocket, status: dict[str, Any]) -> None:
    """Tell the worker how the command ended, and close."""
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
        await websocket.send_text("x" + json.dumps(status))
        await websocket.close()
