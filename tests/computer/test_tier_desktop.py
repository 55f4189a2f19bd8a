"""The desktop on a computer tier: the host runs each agent's display (Xvfb, x11vnc) in the
user's sandbox; a worker's desktop tools reach it, and the owner's live view on any API process
is bridged to the host's VNC websocket, which only workers (the tier's token) open. Real
processes, real bubblewrap, real Xvfb and x11vnc."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as connect_sync
from websockets.typing import Subprotocol

from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.users import create_user
from tests.computer.sandboxes import UID_BASE
from tests.computer.test_desktop import png_size
from tests.computer.tier import TOKEN, ComputerHostProcess
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
WIDTH, HEIGHT = 1280, 800


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _tool_results(url: str, conversation: str) -> list[dict[str, Any]]:
    """The results of each tool call but send_to_user, in order."""
    found = []
    for (payload,) in rows(
        url,
        "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
        c=conversation,
    ):
        data = payload if isinstance(payload, dict) else json.loads(payload)
        if data["kind"] == "tool_result" and data["tool_name"] != "send_to_user":
            found.append(data)
    return found


def _turn_done(url: str, conversation: str) -> bool:
    done = rows(
        url,
        "SELECT count(*) FROM turns WHERE conversation_id = :c AND status = 'done'",
        c=conversation,
    )
    return bool(done[0][0] == 1)


def test_the_hosts_display_routes_open_only_with_the_tier_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 85)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    base = f"{host.url}/v1/computers/someone/displays"
    route = base.replace("http://", "ws://") + "/cnv_x/vnc"
    try:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-the-same-size-00"}):
            with pytest.raises(InvalidStatus) as refused:
                connect_sync(route, additional_headers=headers, open_timeout=20)
            assert refused.value.response.status_code == 401
            x = {"holder": "turn", "argv": ["xdotool", "getmouselocation"]}
            assert httpx.post(f"{base}/cnv_x/x", json=x, headers=headers).status_code == 401
            assert httpx.post(f"{base}/cnv_x/control", headers=headers).status_code == 401
            assert httpx.get(base, headers=headers).status_code == 401
        # Refused before anything started: no computer was woken for it.
        assert rows(url, "SELECT count(*) FROM computers") == [(0,)]
        # With the token, a display that was never started is no display.
        with pytest.raises(InvalidStatus) as missing:
            connect_sync(route, additional_headers={"Authorization": f"Bearer {TOKEN}"})
        assert missing.value.response.status_code == 404
    finally:
        host.stop()


def test_input_held_for_the_owner_is_dropped_when_the_worker_gives_up(tmp_path: Path) -> None:
    """A turn preempted while its input waits for the owner's control: the worker's request
    goes away, and the input is not typed once the owner gives control back."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    with database.write() as session:
        user = create_user(session, "someone").id
    database.dispose()
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 92)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    base = f"{host.url}/v1/computers/{user}/displays/cnv_held"
    home = host.data_dir / "homes" / user
    with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as client:
        try:
            looked = client.post(
                f"{base}/x", json={"holder": "t1", "argv": ["xdotool", "getmouselocation"]}
            )
            assert looked.status_code == 200 and looked.json()["exit_code"] == 0, looked.text
            assert client.post(f"{base}/control").json()["owner_control"] is True
            typed = ["sh", "-c", "touch /home/agent/typed"]
            started = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):  # the worker gives up on it
                client.post(
                    f"{base}/x",
                    json={"holder": "t2", "argv": typed, "as_input": True},
                    timeout=2,
                )
            assert time.monotonic() - started < 10
            time.sleep(1.5)  # the host notices the request went away
            assert client.delete(f"{base}/control").json()["owner_control"] is False
            time.sleep(2)
            assert not (home / "typed").exists()
            # Input not held back runs as before.
            ran = client.post(
                f"{base}/x", json={"holder": "t3", "argv": typed, "as_input": True}
            ).json()
            assert ran["ran"] is True and ran["exit_code"] == 0, ran
            assert (home / "typed").exists()
        finally:
            host.stop()


async def _exactly(ws: ClientConnection, buffer: bytearray, size: int) -> bytes:
    """The next `size` bytes of the RFB stream (websocket messages split it anywhere)."""
    while len(buffer) < size:
        message = await asyncio.wait_for(ws.recv(), 30)
        assert isinstance(message, bytes)
        buffer.extend(message)
    taken = bytes(buffer[:size])
    del buffer[:size]
    return taken


async def _first_frame(api: str, agent: str, token: str) -> tuple[float, tuple[int, ...]]:
    """Open the live view as its owner, speak RFB to the first framebuffer update's first
    rectangle (its pixels read in full): how long that took, and the rectangle."""
    started = time.monotonic()
    address = f"{api.replace('http://', 'ws://')}/v1/displays/{agent}/vnc"
    async with connect(address, subprotocols=[Subprotocol("binary")], max_size=None) as ws:
        await ws.send(token)
        buffer = bytearray()
        greeting = await _exactly(ws, buffer, 12)
        assert re.fullmatch(rb"RFB 003\.00[378]\n", greeting), greeting
        await ws.send(b"RFB 003.008\n")
        count = (await _exactly(ws, buffer, 1))[0]
        assert 1 in await _exactly(ws, buffer, count)  # "None" security offered
        await ws.send(bytes([1]))
        assert await _exactly(ws, buffer, 4) == b"\0\0\0\0"
        await ws.send(bytes([1]))  # ClientInit: shared
        init = await _exactly(ws, buffer, 24)
        assert struct.unpack(">HH", init[:4]) == (WIDTH, HEIGHT)
        bytes_per_pixel = init[4] // 8
        await _exactly(ws, buffer, struct.unpack(">I", init[20:24])[0])  # its name
        await ws.send(struct.pack(">BBHHHH", 3, 0, 0, 0, WIDTH, HEIGHT))  # a full update
        kind, _, rectangles = struct.unpack(">BBH", await _exactly(ws, buffer, 4))
        assert kind == 0 and rectangles >= 1  # FramebufferUpdate
        x, y, w, h, encoding = struct.unpack(">HHHHi", await _exactly(ws, buffer, 12))
        assert encoding == 0 and x + w <= WIDTH and y + h <= HEIGHT and w * h > 0  # raw
        await _exactly(ws, buffer, w * h * bytes_per_pixel)
        return time.monotonic() - started, (x, y, w, h)


def test_a_workers_desktop_tools_and_the_live_view_go_through_the_computer_host(
    tmp_path: Path,
) -> None:
    script = [
        _call("desktop_key", keys="Return"),
        _call("desktop_screenshot"),
        _call("send_to_user", text="looked", final=True),
    ]
    model = write_script(tmp_path / "script.json", script)
    with fresh_database("postgresql", tmp_path) as url:
        host = ComputerHostProcess(
            tmp_path / "host",
            url,
            env={
                "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
                "NIGHTOWL_SANDBOX_NETWORK": "none",
                "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 80),
                "NIGHTOWL_SANDBOX_MEMORY_MB": "1024",
            },
        )
        tier = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_COMPUTER_HOSTS": host.url}
        worker = ServerProcess(tmp_path / "worker", url, model=model, env=tier)
        # The live view is served by another process, of role api: the host, not the
        # worker that ran the turn, holds the display.
        api = ServerProcess(tmp_path / "api", url, env={**tier, "NIGHTOWL_ROLE": "api"})
        processes = [host.start(), worker.start()]
        processes.append(api.start())
        try:
            with worker.client() as client:
                owner = client.get("/v1/me").json()["id"]
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "1", "text": "look at your desktop"},
                )
            wait_for(lambda: _turn_done(url, conversation), timeout=240)
            key, shot = _tool_results(url, conversation)
            assert key["tool_name"] == "desktop_key" and not key.get("is_error"), key
            assert "Done: pressed Return" in key["text"], key
            assert shot["tool_name"] == "desktop_screenshot" and not shot.get("is_error"), shot
            # The screenshot is in the user's home on the host; the worker has no home for it.
            home = host.data_dir / "homes" / owner
            saved = list((home / ".nightowl" / "screens").glob("*.png"))
            assert len(saved) == 1 and saved[0].name in shot["text"], shot
            assert png_size(saved[0]) == (WIDTH, HEIGHT)
            assert not (tmp_path / "worker" / "homes" / owner).exists()

            with api.client(worker.token) as client:
                listed = client.get("/v1/displays").json()
                assert [d["agent"] for d in listed] == [conversation], listed
                assert listed[0]["running"] is True and listed[0]["width"] == WIDTH
                taken = client.post(f"/v1/displays/{conversation}/control", timeout=120)
                assert taken.status_code == 200 and taken.json()["owner_control"] is True
                given = client.delete(f"/v1/displays/{conversation}/control", timeout=120)
                assert given.status_code == 200 and given.json()["owner_control"] is False
                assert client.get("/v1/displays/cnv_none").status_code == 404

            took, rectangle = asyncio.run(_first_frame(api.url, conversation, worker.token))
            print(f"first frame through the host: {took:.2f} s, rectangle {rectangle}")
            assert took < 30, took
            # A member's token finds no display of theirs (the owner's check is unchanged).
            member = api.member_token("member")
            address = f"{api.url.replace('http://', 'ws://')}/v1/displays/{conversation}/vnc"

            async def refused() -> int:
                async with connect(address, subprotocols=[Subprotocol("binary")]) as ws:
                    await ws.send(member)
                    await ws.wait_closed()
                    assert ws.close_code is not None
                    return ws.close_code

            assert asyncio.run(refused()) == 4404
            # The viewer gone, the host's relay ended: no one watches any more.
            with api.client(worker.token) as client:
                wait_for(
                    lambda: client.get(f"/v1/displays/{conversation}").json()["viewers"] == 0,
                    timeout=30,
                )
        finally:
            for process in processes:
                process.stop()
