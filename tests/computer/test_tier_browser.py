"""The browser on a computer tier: the host runs Chromium in the user's sandbox and serves its
DevTools protocol on a websocket that only workers (the tier's token) open; a worker's browser
tools drive it with Playwright over CDP. Real processes, real bubblewrap, real Chromium."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from nightowl.computer.browser import Browsers, BrowserSession
from nightowl.computer.browser_relay import PROFILE_INSIDE
from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.computer.remote import RemoteComputers
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from tests.computer.sandboxes import UID_BASE, new_user
from tests.computer.test_browser import serve_pages
from tests.computer.tier import TOKEN, ComputerHostProcess
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow

PAGE = """<!doctype html><html><head><title>Tide table</title></head><body>
<h1>High tide</h1><p id="when">waiting</p>
<script>document.getElementById("when").textContent = "High tide at " + (6 + 7) + ":42";</script>
</body></html>"""


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _done(text: str) -> dict[str, Any]:
    return _call("send_to_user", text=text, final=True)


def _tool_results(url: str, conversation: str) -> list[tuple[str, str]]:
    """(tool, what the model saw) of each tool call but send_to_user, in order."""
    found = []
    for (payload,) in rows(
        url,
        "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
        c=conversation,
    ):
        data = payload if isinstance(payload, dict) else json.loads(payload)
        if data["kind"] == "tool_result" and data["tool_name"] != "send_to_user":
            found.append((str(data["tool_name"]), str(data["text"])))
    return found


def _turns_done(url: str, conversation: str, count: int) -> bool:
    done = rows(
        url,
        "SELECT count(*) FROM turns WHERE conversation_id = :c AND status = 'done'",
        c=conversation,
    )
    return bool(done[0][0] >= count)


def _chromiums_with_profile() -> list[int]:
    """The host uids of the processes running Chromium with a sandbox's profile."""
    uids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (entry / "status").read_text()
        except (OSError, NotADirectoryError):
            continue
        if "--remote-debugging-pipe" in cmdline and PROFILE_INSIDE in cmdline:
            uids += [int(line.split()[1]) for line in status.splitlines() if line[:4] == "Uid:"]
    return uids


def test_the_browser_websocket_opens_only_with_the_tier_token_and_a_holder(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 95)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    route = host.url.replace("http://", "ws://") + "/v1/computers/someone/browser?holder=turn"
    try:
        for headers, status in [
            ({}, 401),
            ({"Authorization": "Bearer wrong-token-of-the-same-size-00"}, 401),
            ({"Authorization": f"Bearer {TOKEN}x"}, 401),
        ]:
            with pytest.raises(InvalidStatus) as refused:
                connect(route, additional_headers=headers, open_timeout=20)
            assert refused.value.response.status_code == status
            assert b"token" in refused.value.response.body
        with pytest.raises(InvalidStatus) as no_holder:
            connect(
                route.removesuffix("?holder=turn"),
                additional_headers={"Authorization": f"Bearer {TOKEN}"},
                open_timeout=20,
            )
        assert no_holder.value.response.status_code == 422
        # Refused before anything started: no computer was placed, no Chromium runs.
        assert rows(url, "SELECT count(*) FROM computers") == [(0,)]
    finally:
        host.stop()


def test_a_workers_browser_tools_drive_chromium_on_the_computer_host(tmp_path: Path) -> None:
    page = "file:///home/agent/site/tide.html"
    with fresh_database("postgresql", tmp_path) as url:
        common = {
            "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
            "NIGHTOWL_SANDBOX_NETWORK": "none",
            "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 97),
        }
        host = ComputerHostProcess(tmp_path / "host", url, env=common)
        script = [
            # turn 1: a page in the home, opened, read as text and photographed
            _call("write_file", path="site/tide.html", content=PAGE),
            _call("browser_open", url=page),
            _call("browser_read", mode="text"),
            _call("browser_screenshot"),
            # the sandbox's network policy holds: the host's own port is out of reach
            _call("browser_open", url=f"{host.url}/healthz"),
            _done("read it"),
            # turn 2, after the computer slept on its host (its browser closed there first)
            _call("browser_open", url=page),
            _done("again"),
        ]
        model = write_script(tmp_path / "script.json", script)
        worker = ServerProcess(
            tmp_path / "worker",
            url,
            model=model,
            # The deployment's one network setting: the host's sandboxes reach nothing, and
            # the worker's safety review knows it (a file page can then load nothing from
            # outside, so it is not held in the tainted second turn).
            env={
                "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
                "NIGHTOWL_COMPUTER_HOSTS": host.url,
                "NIGHTOWL_SANDBOX_NETWORK": "none",
            },
        )
        processes = [host.start(), worker.start()]
        try:
            with worker.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    # The owner names the host's address: the safety review lets it be tried.
                    json={"client_id": "1", "text": f"when is high tide? and {host.url}?"},
                )
            wait_for(lambda: _turns_done(url, conversation, 1), timeout=120)
            results = _tool_results(url, conversation)
            assert [tool for tool, _ in results] == [
                "write_file",
                "browser_open",
                "browser_read",
                "browser_screenshot",
                "browser_open",
            ]
            opened, read, shot, host_port = (text for _, text in results[1:])
            assert "ERR_CONNECTION_REFUSED" in host_port and '"host"' not in host_port, host_port
            assert "Tide table" in opened and "High tide" in opened, opened
            assert "High tide at 13:42" in read, read  # the page's script ran
            owner = rows(url, "SELECT user_id FROM computers")[0][0]
            home = host.data_dir / "homes" / owner
            saved = list((home / ".browser" / "screenshots").glob("*.png"))
            assert len(saved) == 1 and saved[0].name in shot, shot
            assert saved[0].read_bytes().startswith(b"\x89PNG")
            assert saved[0].stat().st_uid == home.stat().st_uid != 0
            # Chromium runs on the host, inside the sandbox, as its uid: never as root, and
            # the worker started none (the worker runs on this machine too: same /proc).
            assert home.stat().st_uid in _chromiums_with_profile()
            assert 0 not in _chromiums_with_profile()
            assert (home / PROFILE_INSIDE.removeprefix("/home/agent/") / "Default").is_dir()

            # The computer sleeps on its host: its browser is closed there first ...
            uid = home.stat().st_uid
            slept = httpx.post(
                f"{host.url}/v1/computers/{owner}/sleep",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=120,
            )
            assert slept.json() == {"slept": True}
            assert uid not in _chromiums_with_profile()
            # ... and the next turn's browser starts again on the woken computer.
            with worker.client() as client:
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "2", "text": "and again?"},
                )
            wait_for(lambda: _turns_done(url, conversation, 2), timeout=120)
            tool, again = _tool_results(url, conversation)[5]
            assert tool == "browser_open" and "High tide at 13:42" in again, again
        finally:
            for process in processes:
                process.stop()


def test_a_login_survives_the_browser_closing_and_a_second_worker_takes_the_browser_over(
    tmp_path: Path,
) -> None:
    """Two workers' browsers for one user on one host: the newer connection ends the older
    one (one Chromium per user), and closing a connection closes Chromium cleanly on the
    host, its profile (a login's cookie) flushed to the home."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    user = new_user(database, "someone")
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 99)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    tier = RemoteComputers([host.url], TOKEN, database, wait_s=30)
    local = ComputerSettings(homes_dir=tmp_path / "homes", snapshot_dir=tmp_path / "snapshots")
    first, second = Browsers(Computers(local, database)), Browsers(Computers(local, database))

    async def text(session: BrowserSession) -> str:
        return await session.current_page().locator("body").inner_text()

    def opened(address: str) -> Callable[[BrowserSession], Awaitable[str]]:
        async def work(session: BrowserSession) -> str:
            await session.current_page().goto(address)
            return await text(session)

        return work

    async def scenario() -> None:
        sandbox = await tier.acquire(user, "turn")
        site = (await serve_pages(sandbox)).removesuffix("form.html")  # type: ignore[arg-type]
        assert "Signed in" in await first.use(user, sandbox, opened(f"{site}login.html"))
        uid = (host.data_dir / "homes" / user).stat().st_uid
        assert _chromiums_with_profile().count(uid) >= 1

        # A second worker's browser: the host closes the first one's Chromium for it.
        who = await second.use(user, sandbox, opened(f"{site}whoami.html"))
        assert "cookie: session=s3cret" in who  # flushed by the clean close, read again
        await asyncio.sleep(0.5)
        assert not first._sessions[user].usable(sandbox)  # its connection was ended

        # The worker closes its browser: Chromium ends on the host (none left running).
        await second.close_user(user)
        await asyncio.to_thread(wait_for, lambda: uid not in _chromiums_with_profile(), 20)
        # The first worker's next call connects again, to a fresh Chromium, same profile.
        who = await first.use(user, sandbox, opened(f"{site}whoami.html"))
        assert "cookie: session=s3cret" in who
        await first.close()
        await second.close()
        await tier.release("turn")

    try:
        asyncio.run(scenario())
    finally:
        host.stop()
        database.dispose()
