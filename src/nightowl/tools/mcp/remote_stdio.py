"""The stdio transport of an MCP server in a computer on a computer host.

The host runs the server inside the sandbox and carries its stdio over a websocket
(computer/stdio_host.py: our first message names the command; then one message per stdin
line, and `o`/`e`/`x`-tagged messages back for its stdout lines, stderr lines and its end);
this module turns that into the SDK's session streams, as sandbox_stdio does for a sandbox in
this process. Leaving the block closes the websocket, and the host kills the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from nightowl.computer.protocol import Endpoint
from nightowl.tools.mcp.mcp_internals import TransportStreams
from nightowl.tools.mcp.sandbox_stdio import MAX_LINE_BYTES, ServerOutput, json_rpc_streams

OPEN_TIMEOUT_S = 120.0  # the host may wake the computer from its snapshot first


class RemoteStdioError(RuntimeError):
    """The host could not run the server (its words)."""


@contextlib.asynccontextmanager
async def remote_stdio(
    endpoint: Endpoint,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    stderr: ServerOutput | None = None,
) -> AsyncIterator[TransportStreams]:
    """Run `argv` in the computer on its host (at its `stdio_endpoint`) and speak MCP over
    its stdin and stdout."""
    address, headers = endpoint
    output = stderr or ServerOutput()
    try:
        websocket = await connect(
            address,
            additional_headers=headers,
            max_size=MAX_LINE_BYTES,
            open_timeout=OPEN_TIMEOUT_S,
        )
    except (OSError, TimeoutError, ConnectionClosed) as error:
        raise RemoteStdioError(f"the computer host did not open ({error})") from None
    except Exception as error:  # refused: InvalidStatus, with the host's reason
        body = getattr(getattr(error, "response", None), "body", b"") or b""
        said = body.decode(errors="replace")[:300]
        raise RemoteStdioError(f"the computer host refused ({error}) {said}".strip()) from None
    async with websocket:
        await websocket.send(json.dumps({"argv": list(argv), "env": env or {}}))
        lines: asyncio.Queue[bytes] = asyncio.Queue()
        ended = asyncio.Event()

        async def demultiplex() -> None:
            try:
                await _receive(websocket, lines, output)
            finally:
                ended.set()
                lines.put_nowait(b"")  # the end of its stdout

        async def write_line(line: bytes) -> None:
            await websocket.send(line.decode())

        async def exited() -> None:
            await ended.wait()

        async with json_rpc_streams(lines.get, write_line, exited, [demultiplex]) as streams:
            yield streams


async def _receive(
    websocket: ClientConnection, lines: asyncio.Queue[bytes], output: ServerOutput
) -> None:
    """Sort the host's messages until the server ends (or the connection does)."""
    with contextlib.suppress(ConnectionClosed):
        async for message in websocket:
            text = message if isinstance(message, str) else message.decode(errors="replace")
            kind, body = text[:1], text[1:]
            if kind == "o":
                lines.put_nowait(body.encode())
            elif kind == "e":
                output.lines.append(body)
            elif kind == "x":
                with contextlib.suppress(ValueError):
                    why = json.loads(body).get("error")
                    if why:
                        output.lines.append(str(why))
                return
