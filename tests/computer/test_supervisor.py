"""The sandbox's supervisor, as a command inside sees it (real bubblewrap)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.computer.sandboxes import computers_for, new_user


def test_descriptors_3_and_4_stay_open_in_the_supervisor_between_requests(
    tmp_path: Path,
) -> None:
    """A command given the caller's descriptors gets them on 3 and 4, which Popen insists are
    open in the supervisor; were they a request's socket, one closing meanwhile on another
    thread failed the launch ("Bad file descriptor: '/home/agent'", a browser's start)."""

    async def scenario() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "someone")
            sandbox = await computers.acquire(user, "turn")
            # $PPID is the supervisor: this command's request socket is open there now.
            listing = "for fd in 3 4; do readlink /proc/$PPID/fd/$fd || echo closed; done"
            result = await sandbox.run(listing, output="fds.txt", timeout_s=30)
            assert result.exit_code == 0
            fds = (computers.home(user) / "fds.txt").read_text().split()
            assert fds == ["/dev/null", "/dev/null"], fds

            reader, writer = os.pipe()
            null = os.open(os.devnull, os.O_RDWR)
            try:  # and a command still gets the caller's descriptors there
                async with sandbox.attached(
                    ["/bin/sh", "-c", "echo through >&4"], [null, null, null, null, writer]
                ) as ended:
                    await ended.readline()
            finally:
                os.close(writer)
                os.close(null)
            assert os.read(reader, 100) == b"through\n"
            os.close(reader)

    asyncio.run(scenario())


def test_a_file_past_64_kb_is_read_whole(tmp_path: Path) -> None:
    """A read's answer is one line of JSON: a file of 1 MB (non-ASCII text, escaped to six
    bytes a character) comes back whole, where asyncio's 64 KB line limit failed it."""

    async def scenario() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "someone")
            sandbox = await computers.acquire(user, "turn")
            text = "héllo wörld ünïcode ✓\n" * 50_000
            (computers.home(user) / "big.txt").write_text(text)
            answer = await sandbox.call({"op": "read", "path": "big.txt"})
            assert answer["text"] == text
            assert answer["size"] == len(text.encode())

    asyncio.run(scenario())
