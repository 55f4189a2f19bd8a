"""A sandbox in this process and a computer on a computer host are both a `Computer`; where
they differ (where they run, how a browser or a command's stdio is reached, whether two
handles are the same computer) each says so itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nightowl.computer.protocol import Computer
from nightowl.computer.remote import RemoteComputers, RemoteSandbox
from nightowl.store.database import Database
from tests.computer.sandboxes import computers_for, new_user


def test_a_local_sandbox_is_a_computer_here(tmp_path: Path) -> None:
    async def scenario() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "ada")
            sandbox = await computers.acquire(user, "turn-1")
            assert isinstance(sandbox, Computer)
            assert computers.homes_here
            assert sandbox.host is None
            assert sandbox.browser_endpoint() is None and sandbox.stdio_endpoint() is None
            assert sandbox.is_same_computer(await computers.acquire(user, "turn-2"))
            assert not sandbox.is_same_computer(None)

            ended = await sandbox.write_bytes("/home/agent/shots/a.bin", b"\x00\x01png")
            assert ended.exit_code == 0
            written = computers.home(user) / "shots" / "a.bin"
            assert written.read_bytes() == b"\x00\x01png"
            assert written.stat().st_uid == sandbox.spec.uid  # the computer's user wrote it

            await computers.release("turn-1")
            await computers.release("turn-2")
            await computers.destroy(user)
            assert not sandbox.is_same_computer(sandbox)  # stopped: no longer running

    asyncio.run(scenario())


def test_a_remote_sandbox_is_a_computer_on_its_host(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        tier = RemoteComputers(["http://host-a:8100/"], "token", database, wait_s=1)
        sandbox = RemoteSandbox(tier, "http://host-a:8100", "ada", "turn-1")
        assert isinstance(sandbox, Computer)
        assert not tier.homes_here
        assert sandbox.host == "http://host-a:8100"
        address, headers = sandbox.stdio_endpoint()
        assert address == "ws://host-a:8100/v1/computers/ada/stdio?holder=turn-1"
        assert headers == {"Authorization": "Bearer token"}
        assert sandbox.browser_endpoint()[0].startswith("ws://host-a:8100/v1/computers/ada/")
        # A handle is per turn: another turn's on the same host is the same computer.
        assert sandbox.is_same_computer(RemoteSandbox(tier, sandbox.host, "ada", "turn-2"))
        assert not sandbox.is_same_computer(RemoteSandbox(tier, sandbox.host, "bo", "turn-1"))
        assert not sandbox.is_same_computer(RemoteSandbox(tier, "http://b:1", "ada", "turn-1"))
        assert not sandbox.is_same_computer(None)
        assert not sandbox.alive()  # the tier never handed it out, so holds it for no one
    finally:
        database.dispose()
