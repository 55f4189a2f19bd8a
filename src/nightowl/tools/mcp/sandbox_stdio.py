"""The stdio transport of an MCP server that runs inside the user's computer.

An MCP server is someone else's code, so it never runs on the host: the sandbox's supervisor
starts it with our ends of three socket pairs as its stdin, stdout and stderr, and this module
bridges newline-delimited JSON-RPC between them and the SDK's session streams (the same framing
as the SDK's own `stdio_client`, which can only start a process on the host). Leaving the block
closes the request, and the supervisor kills the server's whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from nightowl.computer.protocol import Computer
from nightowl.tools.mcp.mcp_internals import TransportStreams

log = logging.getLogger(__name__)
MAX_LINE_BYTES = 16 * 1024 * 1024


class ServerOutput:
    """The last lines a server wrote to stderr (what it said when it failed)."""

    def __init__(self, lines: int = 20) -> None:
        self.lines: deque[str] = deque(maxlen=lines)

    def tail(self) -> str:
        """Its last lines, joined."""
        return " | ".join(line for line in self.lines if line.strip())[-1000:]


@contextlib.asynccontextmanager
async def sandbox_stdio(
    sandbox: Computer,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    stderr: ServerOutput | None = None,
) -> AsyncIterator[TransportStreams]:
    """Run `argv` inside `sandbox` and speak MCP over its stdin and stdout."""
    stdin_ours, stdin_theirs = socket.socketpair()
    stdout_ours, stdout_theirs = socket.socketpair()
    stderr_ours, stderr_theirs = socket.socketpair()
    theirs = [stdin_theirs, stdout_theirs, stderr_theirs]
    output = stderr or ServerOutput()
    try:
        async with sandbox.attached(list(argv), [s.fileno() for s in theirs], env=env) as ended:
            for sock in theirs:
                sock.close()  # the supervisor holds them now
            # Keep every StreamWriter referenced: a collected one closes its socket.
            reader, out_writer = await asyncio.open_connection(
                sock=stdout_ours, limit=MAX_LINE_BYTES
            )
            _, writer = await asyncio.open_connection(sock=stdin_ours)
            errors, err_writer = await asyncio.open_connection(sock=stderr_ours)

            async def write_line(line: bytes) -> None:
                writer.write(line + b"\n")
                await writer.drain()

            async def pump_errors() -> None:
                while line := await errors.readline():
                    output.lines.append(line.decode(errors="replace").rstrip())

            async def exited() -> None:
                await ended.readline()  # the supervisor reports the server's exit

            try:
                async with json_rpc_streams(
                    reader.readline, write_line, exited, [pump_errors]
                ) as streams:
                    yield streams
            finally:
                for each in (writer, out_writer, err_writer):
                    with contextlib.suppress(OSError):
                        each.close()
    finally:
        for sock in (*theirs, stdin_ours, stdout_ours, stderr_ours):
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.asynccontextmanager
async def json_rpc_streams(
    read_line: Callable[[], Awaitable[bytes]],
    write_line: Callable[[bytes], Awaitable[None]],
    exited: Callable[[], Awaitable[None]],
    others: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> AsyncIterator[TransportStreams]:
    """The SDK's session streams over a server's stdout lines (`read_line`, b"" at the end)
    and stdin (`write_line`); the session ends soon after `exited` returns. `others` run
    beside (its stderr)."""
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](16)

    async def pump_out() -> None:
        async with to_session:
            while line := await read_line():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as error:
                    await to_session.send(error)
                    continue
                await to_session.send(SessionMessage(message))

    async def pump_in() -> None:
        async with from_session:
            async for item in from_session:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                await write_line(data.encode())

    async def watch_exit() -> None:
        await exited()
        await anyio.sleep(0.2)  # its last words on stdout and stderr first
        await to_session.aclose()

    try:
        async with anyio.create_task_group() as tasks:
            for pump in (pump_out, pump_in, watch_exit, *others):
                tasks.start_soon(pump)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        for stream in (read_stream, write_stream, to_session, from_session):
            await stream.aclose()
