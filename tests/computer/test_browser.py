"""The browser runs inside the user's sandbox (real bubblewrap, real Chromium, no mocks)."""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nightowl.computer.browser import Browsers
from nightowl.computer.browser_relay import PROFILE_INSIDE
from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.computer.sandbox import HOME_INSIDE, Sandbox
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.users import ensure_owner
from nightowl.tools.browser import browser_tools
from nightowl.tools.registry import Tool, ToolContext, ToolResult

pytestmark = pytest.mark.timeout(120)

PORT = 8765
# Apart from the server's default range and from other test processes (cgroups are per uid).
UID_BASE = 3_900_000 + (os.getpid() % 1000) * 100
FORM = """<!doctype html><html><head><title>Sign up</title></head><body>
<h1>Sign up</h1>
<form action="result.html" method="get">
  <label>Name <input name="name"></label>
  <label>Color <select name="color"><option>red</option><option>blue</option></select></label>
  <button type="submit">Send</button>
</form></body></html>"""
RESULT = """<!doctype html><html><head><title>Thanks</title></head><body>
<p id="out">waiting</p>
<script>
  const query = new URLSearchParams(location.search);
  document.getElementById("out").textContent =
    "Thanks, " + query.get("name") + " (" + query.get("color") + ")";
</script></body></html>"""
LOGIN = """<!doctype html><html><head><title>Login</title></head><body><p>Signed in</p>
<script>document.cookie = "session=s3cret; max-age=86400; path=/";</script></body></html>"""
WHOAMI = """<!doctype html><html><head><title>Who</title></head><body><p id="who"></p>
<script>document.getElementById("who").textContent = "cookie: " + document.cookie;</script>
</body></html>"""


@dataclass
class World:
    """A server's worth of computers and browsers for one owner."""

    root: Path
    computers: Computers
    browsers: Browsers
    tools: dict[str, Tool]
    ctx: ToolContext

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        tool = self.tools[name]
        result = await tool.run(tool.arguments.model_validate(arguments), self.ctx)
        assert not result.is_error, result.content
        return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A folder for the store, homes and snapshots (root-only, like a real data dir)."""
    return tmp_path


def run_world(root: Path, scenario: Callable[[World], Awaitable[None]]) -> None:
    """Run `scenario` against real computers and browsers, closed afterwards."""

    async def main() -> None:
        database = Database(f"sqlite:///{root / 'nightowl.db'}")
        upgrade(database)
        with database.write() as session:
            owner = ensure_owner(session).id
        settings = ComputerSettings(
            homes_dir=root / "homes",
            snapshot_dir=root / "snapshots",
            network="none",
            uid_base=UID_BASE,
        )
        computers = Computers(settings, database)
        browsers = Browsers(computers)
        ctx = ToolContext(
            database=database,
            blob_dir=root / "blobs",
            conversation_id="cnv_test",
            owner_id=owner,
            turn_id="trn_test",
            call_id="call_test",
            home=computers.home(owner),
            computers=computers,
        )
        tools = {tool.name: tool for tool in browser_tools(browsers)}
        try:
            await scenario(World(root, computers, browsers, tools, ctx))
        finally:
            await browsers.close()
            computers.close()
            database.dispose()

    asyncio.run(main())


async def serve_pages(sandbox: Sandbox) -> str:
    """The form and its result page, served from inside the sandbox on its own loopback."""
    await sandbox.call({"op": "write", "path": "site/form.html", "content": FORM})
    await sandbox.call({"op": "write", "path": "site/result.html", "content": RESULT})
    await sandbox.call({"op": "write", "path": "site/login.html", "content": LOGIN})
    await sandbox.call({"op": "write", "path": "site/whoami.html", "content": WHOAMI})
    argv = ["python3", "-m", "http.server", str(PORT), "--bind", "127.0.0.1", "-d", "site"]
    await sandbox.start_daemon(argv, output="site.log")
    wait = (
        "import socket, time\n"
        "for _ in range(400):\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {PORT}), 0.2).close(); break\n"
        "    except OSError: time.sleep(0.05)\n"
        "else:\n"
        "    raise SystemExit('the site did not start')\n"
    )
    assert (await sandbox.run(["python3", "-c", wait], timeout_s=120)).exit_code == 0
    return f"http://127.0.0.1:{PORT}/form.html"


def ref_of(snapshot: str, role: str, name: str) -> str:
    """The ref of the element with this role and accessible name in a snapshot."""
    found = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(e\d+)\]', snapshot)
    assert found is not None, f"no {role} {name!r} in:\n{snapshot}"
    return found.group(1)


def test_browser_fills_and_submits_a_form_by_snapshot_refs(root: Path) -> None:
    async def scenario(world: World) -> None:
        url = await serve_pages(await world.ctx.sandbox())
        opened = await world.call("browser_open", url=url)
        assert "Sign up" in opened.content
        name = ref_of(opened.content, "textbox", "Name")
        color = ref_of(opened.content, "combobox", "Color")
        send = ref_of(opened.content, "button", "Send")

        await world.call("browser_act", action="fill", ref=name, value="Ada Lovelace")
        await world.call("browser_act", action="select", ref=color, value="blue")
        submitted = await world.call("browser_act", action="click", ref=send)

        assert "Thanks, Ada Lovelace (blue)" in submitted.content
        assert "result.html?name=Ada+Lovelace&color=blue" in submitted.content
        text = await world.call("browser_read", mode="text")
        assert "Thanks, Ada Lovelace (blue)" in text.content
        log = (world.computers.home(world.ctx.owner_id) / "site.log").read_text()
        assert "GET /result.html?name=Ada+Lovelace&color=blue" in log

        shot = await world.call("browser_read", mode="screenshot")
        inside = shot.meta["file"]
        assert inside.startswith(f"{HOME_INSIDE}/") and inside in shot.content
        on_host = world.ctx.home / inside.removeprefix(f"{HOME_INSIDE}/")
        assert on_host.read_bytes().startswith(b"\x89PNG")
        assert on_host.stat().st_uid == (await world.ctx.sandbox()).spec.uid

        stale = await world.tools["browser_act"].run(
            world.tools["browser_act"].arguments.model_validate({"action": "click", "ref": "e999"}),
            world.ctx,
        )
        assert stale.is_error and "browser_read" in stale.content

    run_world(root, scenario)


def test_chromium_runs_inside_the_sandbox_with_its_profile_in_the_home(root: Path) -> None:
    async def scenario(world: World) -> None:
        sandbox = await world.ctx.sandbox()
        launches = []
        for _ in range(3):
            started = time.monotonic()
            await world.call("browser_open", url="about:blank")
            launches.append(time.monotonic() - started)
            await world.browsers.close_user(world.ctx.owner_id)
        print(f"browser launch p50: {statistics.median(launches):.2f}s of {launches}")
        await world.call("browser_open", url="about:blank")

        home = world.computers.home(world.ctx.owner_id)
        profile = home / PROFILE_INSIDE.removeprefix(f"{HOME_INSIDE}/")
        assert profile.is_dir() and (profile / "Default").is_dir()
        assert profile.stat().st_uid == sandbox.spec.uid
        assert (profile / "Default").stat().st_uid == sandbox.spec.uid

        ps = await sandbox.run(["ps", "-eo", "pid,user,args"], output="ps.txt", timeout_s=60)
        assert ps.exit_code == 0
        listing = (home / "ps.txt").read_text()
        browsers = [line for line in listing.splitlines() if "/chromium" in line]
        assert browsers, listing
        assert all(" agent " in f" {line} " for line in browsers), listing
        assert all(f"--user-data-dir={PROFILE_INSIDE}" in line for line in browsers[:1])

        # On the host, this sandbox's Chromium runs as its uid, and no Chromium with a
        # sandbox's profile runs as root (other test processes run their own sandboxes,
        # with the same profile path inside, side by side).
        uids = {
            int(line.split()[1])
            for cmdline, status in _host_processes()
            if PROFILE_INSIDE in cmdline
            for line in status.splitlines()
            if line.startswith("Uid:")
        }
        assert sandbox.spec.uid in uids
        assert 0 not in uids

    run_world(root, scenario)


def test_logins_survive_a_frozen_sandbox_and_a_deep_sleep(root: Path) -> None:
    async def scenario(world: World) -> None:
        owner = world.ctx.owner_id
        site = (await serve_pages(await world.ctx.sandbox())).removesuffix("form.html")
        await world.call("browser_open", url=f"{site}login.html")

        await world.computers.release(world.ctx.turn_id)  # the turn ends: frozen
        assert world.computers.state(owner) == "frozen"
        world.ctx = replace(world.ctx, turn_id="trn_second")
        again = await world.call("browser_read", mode="text")  # the next turn thaws it
        assert "Signed in" in again.content

        await world.computers.release(world.ctx.turn_id)
        # Flushes the profile, as before a sleep; called, like the server's sweeps, from
        # another event loop than the one the turns (and Playwright) run on.
        await asyncio.to_thread(asyncio.run, world.browsers.close_user(owner))
        assert await world.computers.deep_sleep(owner)
        assert world.computers.state(owner) == "off" and not world.ctx.home.exists()

        world.ctx = replace(world.ctx, turn_id="trn_third")
        site = (await serve_pages(await world.ctx.sandbox())).removesuffix("form.html")
        who = await world.call("browser_open", url=f"{site}whoami.html")
        assert "cookie: session=s3cret" in who.content

    run_world(root, scenario)


def _host_processes() -> list[tuple[str, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (entry / "status").read_text()
        except OSError:
            continue
        found.append((cmdline, status))
    return found


def test_each_agent_has_its_own_tab_and_shares_the_users_logins(root: Path) -> None:
    async def scenario(world: World) -> None:
        site = (await serve_pages(await world.ctx.sandbox())).removesuffix("form.html")
        first = world.ctx
        await world.call("browser_open", url=f"{site}login.html")  # agent 1 signs in

        world.ctx = replace(first, conversation_id="cnv_other")  # agent 2, same user
        who = await world.call("browser_open", url=f"{site}whoami.html")
        assert "cookie: session=s3cret" in who.content  # one profile: the login is shared

        world.ctx = first  # agent 1's tab is where it left it
        mine = await world.call("browser_read", mode="text")
        assert "Signed in" in mine.content and "login.html" in mine.content
        session = world.browsers._sessions[first.owner_id]
        assert set(session.pages) == {"cnv_test", "cnv_other"}
        assert len(session.context.pages) == 2

    run_world(root, scenario)
