"""Clients that go away mid-stream (the change feed, the live view's websocket) leave no error
in the server's log, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from tests.server import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", database_url).start()
    yield process
    process.stop()


def _errors(server: ServerProcess) -> list[dict[str, object]]:
    return [
        line
        for line in server.log_lines()
        if line.get("level") in ("error", "critical") or "Traceback" in str(line)
    ]


def _hang_up_on_events(server: ServerProcess, *, abruptly: bool) -> None:
    """Open `/v1/events`, read its first bytes, and go away (with a reset when `abruptly`)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        request = f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        sock.sendall(f"{request}\r\n".encode())
        assert b"200 OK" in sock.recv(4096)
        if abruptly:  # SO_LINGER 0: close sends a reset instead of a goodbye
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def _hang_up_on_the_live_view(server: ServerProcess) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/displays/conv_nobody/vnc"
    quiet = await websockets.connect(url)
    await quiet.close()
    gone = await websockets.connect(url)
    gone.transport.abort()
    authenticated = await websockets.connect(url)
    await authenticated.send(server.token)
    authenticated.transport.abort()


def test_clients_that_hang_up_leave_no_error_in_the_log(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        for abruptly in (False, True, False, True):
            _hang_up_on_events(server, abruptly=abruptly)
        asyncio.run(_hang_up_on_the_live_view(server))
        # A change after they left reaches nobody, quietly.
        sent = client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m", "text": "hi"}
        )
        assert sent.status_code == 201
    server.stop()  # a clean stop waits for every connection's handler to finish
    assert _errors(server) == []
