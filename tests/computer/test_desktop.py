"""The agent's virtual desktop, for real: Xvfb, xdotool, ImageMagick and x11vnc inside a
bubblewrap sandbox; the owner's live view over a websocket, and taking control."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from playwright.async_api import async_playwright
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from nightowl.api import display as display_api
from nightowl.api import webapp
from nightowl.api.errors import install_error_handlers
from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.computer.desktop import Desktops, Display
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.users import create_token, create_user, ensure_owner
from nightowl.tools.desktop import desktop_tools
from nightowl.tools.registry import ToolContext, ToolRegistry, ToolResult

# Far from the server's default range and from the other computer tests, apart per process.
UID_BASE = 3_900_000 + (os.getpid() % 1000) * 100
AGENT = "cnv_desktop"


@dataclass
class Desk:
    """A store with an owner (and a member), their sandboxes, and the displays over them."""

    database: Database
    computers: Computers
    desktops: Desktops
    owner: str
    owner_token: str
    member_token: str
    tmp: Path

    def context(self, turn: str = "turn-1") -> ToolContext:
        """What a desktop tool of the owner's agent gets during `turn`."""
        return ToolContext(
            database=self.database,
            blob_dir=self.tmp / "blobs",
            conversation_id=AGENT,
            owner_id=self.owner,
            turn_id=turn,
            call_id="0.0",
            home=self.computers.home(self.owner),
            computers=self.computers,
        )

    async def call(self, name: str, turn: str = "turn-1", **arguments: object) -> ToolResult:
        """Call a desktop tool as the model would (arguments validated by the registry)."""
        registry = ToolRegistry(desktop_tools(self.desktops))
        parsed = registry.parse_arguments(name, dict(arguments))
        if isinstance(parsed, ToolResult):
            return parsed
        tool = registry.get(name)
        assert tool is not None
        return await tool.run(parsed, self.context(turn))

    def display(self) -> Display:
        """The agent's display (started by a first tool call)."""
        found = self.desktops.find(self.owner, AGENT)
        assert found is not None
        return found


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    """A migrated SQLite store, a Computers object without network, and Desktops over it."""
    database = Database(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(database)
    with database.write() as session:
        owner = ensure_owner(session)
        _, owner_token = create_token(session, owner.id, "web")
        member = create_user(session, "member")
        _, member_token = create_token(session, member.id, "web")
    settings = ComputerSettings(
        homes_dir=tmp_path / "homes",
        snapshot_dir=tmp_path / "snapshots",
        network="none",
        memory_bytes=1024**3,
        uid_base=UID_BASE,
        idle_sleep_s=3600,
    )
    computers = Computers(settings, database)
    desktops = Desktops(computers, control_wait_s=1.0)
    try:
        yield Desk(database, computers, desktops, owner.id, owner_token, member_token, tmp_path)
    finally:
        computers.close()
        database.dispose()


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def screenshot_path(desk: Desk, result: ToolResult) -> Path:
    """The screenshot of a desktop_screenshot result, on the host."""
    inside = str(result.meta["file"])
    return desk.computers.home(desk.owner) / inside.removeprefix("/home/agent/")


async def wait_until(check: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> None:
    """Poll an async predicate until it holds."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


def test_tools_click_and_type_into_a_program_and_take_screenshots(desk: Desk) -> None:
    typed = "echo hello from the desktop"

    async def scenario() -> None:
        first = await desk.call("desktop_screenshot")
        assert not first.is_error, first.content
        assert "1280x800 PNG" in first.content
        assert png_size(screenshot_path(desk, first)) == (1280, 800)

        # A terminal at the top left whose shell saves what is typed into it.
        display = desk.display()
        sandbox = await desk.computers.acquire(desk.owner, "turn-1")
        argv = ["xterm", "-geometry", "80x24+0+0", "-e", "sh", "-c", "cat > typed.txt"]
        await sandbox.start_daemon(argv, env=display.env)

        async def xterm_shown() -> bool:
            found = await desk.desktops.x(
                display, ["xdotool", "search", "--onlyvisible", "--class", "xterm"]
            )
            return found.exit_code == 0

        await wait_until(xterm_shown)
        # Without a window manager the keyboard follows the pointer: click into the terminal.
        clicked = await desk.call("desktop_click", x=120, y=100)
        assert not clicked.is_error and "left click at (120, 100)" in clicked.content
        started = time.monotonic()
        result = await desk.call("desktop_type", text=typed + "\n")
        assert not result.is_error, result.content
        typing_s = time.monotonic() - started
        saved = desk.computers.home(desk.owner) / "typed.txt"

        async def line_saved() -> bool:
            return saved.exists() and saved.read_text() == typed + "\n"

        await wait_until(line_saved)
        shot = await desk.call("desktop_screenshot")
        path = screenshot_path(desk, shot)
        assert png_size(path) == (1280, 800)
        # The terminal (white, with the typed line in black) shows on the black screen.
        colours = subprocess.run(
            ["convert", str(path), "-crop", "400x40+0+0", "-format", "%k", "info:"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert int(colours) >= 2
        pressed = await desk.call("desktop_key", keys="ctrl+d")  # end of input: cat exits
        assert not pressed.is_error, pressed.content

        async def xterm_gone() -> bool:
            return not await xterm_shown()

        await wait_until(xterm_gone)
        assert saved.read_text() == typed + "\n"
        assert typing_s < 5, typing_s

    asyncio.run(scenario())


def test_click_positions_key_names_and_input_checks(desk: Desk) -> None:
    async def scenario() -> None:
        assert not (await desk.call("desktop_screenshot")).is_error
        display = desk.display()
        sandbox = await desk.computers.acquire(desk.owner, "turn-1")
        # xev prints every key and button event its window gets.
        argv = ["xev", "-geometry", "600x400+100+100", "-event", "keyboard", "-event", "button"]
        await sandbox.start_daemon(argv, output="xev.log", env=display.env)
        log = desk.computers.home(desk.owner) / "xev.log"

        async def mapped() -> bool:
            found = await desk.desktops.x(display, ["xdotool", "search", "--name", "Event Tester"])
            return found.exit_code == 0

        await wait_until(mapped)
        result = await desk.call("desktop_click", x=300, y=250, button="right", clicks=2)
        assert not result.is_error, result.content
        again = await desk.call("desktop_click", x=300, y=250)  # where the pointer is already
        assert not again.is_error, again.content
        assert not (await desk.call("desktop_key", keys="ctrl+s  Return")).is_error

        async def logged() -> bool:
            text = log.read_text()
            return "keysym 0xff0d, Return" in text and text.count("ButtonRelease") >= 3

        await wait_until(logged)
        events = log.read_text().split("\n\n")
        presses = [e for e in events if e.startswith("ButtonPress")]
        assert all("root:(300,250)" in e for e in presses)
        assert ["button 3," in e for e in presses] == [True, True, False]
        keys = [e for e in events if e.startswith("KeyPress")]
        assert any("keysym 0x73, s)" in e and "state 0x4," in e for e in keys)  # ctrl held

        unknown = await desk.call("desktop_key", keys="NoSuchKey")
        assert unknown.is_error and "Unknown key name 'NoSuchKey'" in unknown.content
        outside = await desk.call("desktop_click", x=1280, y=10)
        assert outside.is_error and "x: Input should be less than or equal to 1279" in (
            outside.content
        )
        assert (await desk.call("desktop_click", x=5, y=-1)).is_error
        odd = await desk.call("desktop_key", keys="ctrl+")
        assert odd.is_error and "not a key name" in odd.content
        escape = await desk.call("desktop_type", text="a\x1bb")
        assert escape.is_error and "desktop_key" in escape.content
        assert (await desk.call("desktop_type", text="")).is_error

        # A display that stopped, or a sandbox built again, comes back at the next call.
        stopped = display.xvfb_pid
        await sandbox.call({"op": "kill", "pid": stopped})
        assert not (await desk.call("desktop_key", keys="Escape")).is_error
        assert display.xvfb_pid not in (None, stopped)
        await desk.computers.destroy(desk.owner)
        again = await desk.call("desktop_screenshot")
        assert not again.is_error and "1280x800" in again.content
        assert desk.display().sandbox is not sandbox

    asyncio.run(scenario())


def test_input_waits_while_the_owner_has_control(desk: Desk) -> None:
    async def scenario() -> None:
        assert not (await desk.call("desktop_screenshot")).is_error
        await desk.desktops.take_control(desk.owner, AGENT)
        assert desk.display().owner_control
        started = time.monotonic()
        refused = await desk.call("desktop_type", text="abc")
        waited = time.monotonic() - started
        assert refused.is_error and "owner has control" in refused.content
        assert 0.9 <= waited < 3, waited
        shot = await desk.call("desktop_screenshot")  # looking is never blocked
        assert not shot.is_error and "owner has control" in shot.content

        # Given back while the agent waits: the waiting input goes through.
        typing = asyncio.create_task(desk.call("desktop_key", keys="Return"))
        await asyncio.sleep(0.5)
        assert not typing.done()
        await desk.desktops.give_back(desk.owner, AGENT)
        result = await asyncio.wait_for(typing, 5)
        assert not result.is_error, result.content
        assert not desk.display().owner_control

    asyncio.run(scenario())


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def serving(desk: Desk, *more: APIRouter) -> AsyncIterator[str]:
    """The display routes (and `more`) served by uvicorn on this event loop; yields the host."""
    app = FastAPI()
    install_error_handlers(app)
    for routes in (display_api.routes, *more):
        app.include_router(routes)
    app.state.database = desk.database
    app.state.desktops = desk.desktops
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done()
        await asyncio.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def closed_with(url: str, first: str | None) -> tuple[int, str]:
    """The close code and reason a viewer gets after sending `first` (or nothing)."""
    async with connect(url, subprotocols=[Subprotocol("binary")]) as ws:
        if first is not None:
            await ws.send(first)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


def test_live_view_relays_vnc_to_the_owner_only(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(display_api, "AUTH_TIMEOUT_S", 0.5)

    async def scenario() -> None:
        async with serving(desk) as host:
            url = f"ws://{host}/v1/displays/{AGENT}/vnc"
            owner = {"Authorization": f"Bearer {desk.owner_token}"}
            # Switching x11vnc by remote control retries for some seconds after a viewer
            # connects (computer/desktop.py): more than httpx's 5 s default under load.
            async with httpx.AsyncClient(
                base_url=f"http://{host}", headers=owner, timeout=60
            ) as http:
                # Before the agent used its desktop there is nothing to watch.
                assert (await closed_with(url, desk.owner_token))[0] == 4404
                assert (await http.get(f"/v1/displays/{AGENT}")).status_code == 404
                assert not (await desk.call("desktop_screenshot")).is_error
                listed = (await http.get("/v1/displays")).json()
                assert [d["agent"] for d in listed] == [AGENT] and listed[0]["width"] == 1280

                assert (await closed_with(url, None))[0] == 4401  # nothing sent in time
                assert (await closed_with(url, ""))[0] == 4401
                code, reason = await closed_with(url, "nwl_wrong")
                assert code == 4401 and "access token" in reason
                assert (await closed_with(url, desk.member_token))[0] == 4404  # not theirs
                other = {"Authorization": f"Bearer {desk.member_token}"}
                refused = await http.post(f"/v1/displays/{AGENT}/control", headers=other)
                assert refused.status_code == 404
                assert (await http.post("/v1/displays/x/control")).status_code == 404

                started = time.monotonic()
                async with connect(url, subprotocols=[Subprotocol("binary")]) as ws:
                    assert ws.subprotocol == "binary"
                    await ws.send(desk.owner_token)
                    greeting = await asyncio.wait_for(ws.recv(), 15)
                    first_frame_s = time.monotonic() - started
                    assert isinstance(greeting, bytes)
                    assert re.fullmatch(rb"RFB 003\.00[378]\n", greeting), greeting
                    # The rest of the handshake, both ways: no auth, then the screen's size.
                    await ws.send(b"RFB 003.008\n")
                    types = await ws.recv()
                    assert isinstance(types, bytes) and 1 in types[1:]
                    await ws.send(bytes([1]))
                    assert await ws.recv() == b"\0\0\0\0"
                    await ws.send(bytes([1]))  # ClientInit: shared
                    init = await ws.recv()
                    assert isinstance(init, bytes)
                    assert struct.unpack(">HH", init[:4]) == (1280, 800)
                    assert desk.display().viewers == 1

                    taken = await http.post(f"/v1/displays/{AGENT}/control")
                    assert taken.status_code == 200 and taken.json()["owner_control"] is True
                    assert await view_only(desk) == "0"
                    given = await http.delete(f"/v1/displays/{AGENT}/control")
                    assert given.json()["owner_control"] is False
                    assert await view_only(desk) == "1"
                assert first_frame_s < 10, first_frame_s

                page = await http.get("/display")
                assert page.status_code == 200 and "display.js" in page.text
                assert "data:" in page.headers["content-security-policy"]
                module = await http.get("/novnc/core/rfb.js")
                assert module.status_code == 200 and "class RFB" in module.text
                assert (await http.get("/novnc/vnc.html")).status_code == 404
                assert (await http.get("/novnc/core/../../../etc/passwd.js")).status_code == 404

        async def viewer_left() -> bool:
            return desk.display().viewers == 0

        await wait_until(viewer_left)

    asyncio.run(scenario())


async def view_only(desk: Desk) -> str:
    """x11vnc's own answer: whether its viewers only watch ('1') or may type ('0')."""
    display = desk.display()
    answer = await desk.desktops.x(
        display, ["x11vnc", "-display", display.env["DISPLAY"], "-Q", "viewonly"]
    )
    found = re.search(r"ans=viewonly:(\d)", answer.output)
    assert found is not None, answer.output
    return found.group(1)


def test_the_page_shows_the_desktop_and_hands_control_over(desk: Desk) -> None:
    async def pointer() -> str:
        display = desk.display()
        return (await desk.desktops.x(display, ["xdotool", "getmouselocation"])).output

    async def scenario() -> None:
        assert not (await desk.call("desktop_click", x=5, y=5)).is_error
        async with serving(desk, webapp.routes) as host, async_playwright() as driver:
            chromium = shutil.which("chromium")
            assert chromium is not None, "Debian's chromium is missing; `make test` installs it"
            browser = await driver.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(15_000)
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            await page.add_init_script(
                f"localStorage.setItem('nightowl.token', {desk.owner_token!r})"
            )
            await page.goto(f"http://{host}/display#agent={AGENT}")
            # The first frame waits for x11vnc to start: a second on an idle machine, far more
            # beside a crash campaign on two cores (the relay waits up to 30 s for it).
            await page.wait_for_selector("#screen canvas", timeout=60_000)
            await page.wait_for_function(
                "document.getElementById('status').textContent.startsWith('Watching')"
            )
            canvas = page.locator("#screen canvas")
            box = await canvas.bounding_box()
            assert box is not None and box["width"] > 600
            await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            await asyncio.sleep(0.5)
            assert "x:5 y:5" in await pointer()  # watching only: the pointer stays

            await page.click("#take")
            await page.wait_for_selector("#give:not([hidden])")
            assert desk.display().owner_control
            nudges = iter(range(1, 10_000))

            async def moved() -> bool:
                # Keep moving: x11vnc may take a few seconds to let input through after the
                # switch, and moves before that are dropped.
                step = next(nudges)
                await page.mouse.move(box["x"] + box["width"] / 2 + step % 50, box["y"] + 40)
                return "x:5 y:5" not in await pointer()

            await wait_until(moved, timeout_s=25)
            await page.click("#give")
            await page.wait_for_selector("#take:not([hidden])")
            assert not desk.display().owner_control
            assert not (await desk.call("desktop_key", keys="Escape")).is_error
            await browser.close()
            assert not problems, problems

    asyncio.run(scenario())
