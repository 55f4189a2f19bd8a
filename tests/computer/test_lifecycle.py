"""A sandbox boots on demand, freezes when its turn ends, sleeps deeply as a snapshot, and
comes back with its files; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nightowl.channels.inbound import write_new_file
from nightowl.computer.sandbox import SandboxError
from nightowl.store.computers import computer_of
from nightowl.store.database import Database
from tests.computer.sandboxes import UID_BASE, computers_for, new_user


def test_freeze_deep_sleep_and_restore(tmp_path: Path, database: Database) -> None:
    async def scenario() -> None:
        with computers_for(tmp_path, database=database) as computers:
            user = new_user(database, "erin")
            assert computers.state(user) == "off"  # nothing boots before a tool needs it
            sandbox = await computers.acquire(user, "turn-1")
            assert computers.state(user) == "running"
            await sandbox.run("mkdir -p work && echo 'draft v1' > work/notes.txt")
            await sandbox.start_daemon(["sleep", "300"])  # a process that outlives its call
            home = computers.home(user)
            assert (home / "work" / "notes.txt").read_text() == "draft v1\n"

            await computers.release("turn-1")
            assert computers.state(user) == "frozen"
            assert sandbox.cgroup is not None
            assert sandbox.cgroup.frozen()

            # Frozen, it wakes at the next call with its processes where they were.
            again = await computers.acquire(user, "turn-2")
            assert again is sandbox and not sandbox.cgroup.frozen()
            assert (await again.run("pgrep -x sleep")).exit_code == 0
            assert await computers.deep_sleep(user) is False  # never during a turn
            await computers.release("turn-2")

            assert await computers.deep_sleep(user) is True
            assert computers.state(user) == "off" and not home.exists()
            with database.read() as session:
                record = computer_of(session, user, UID_BASE)
            assert record.state == "asleep" and record.snapshot and record.snapshot_bytes > 0
            assert sandbox.cgroup.pids() == []  # its processes are gone

            woken = await computers.acquire(user, "turn-3")
            note = await woken.call({"op": "read", "path": "work/notes.txt"})
            assert note["text"] == "draft v1\n"
            with database.read() as session:
                assert computer_of(session, user, UID_BASE).state == "awake"
            await computers.release("turn-3")

    asyncio.run(scenario())


def test_a_destroyed_sandbox_is_rebuilt_with_its_home(tmp_path: Path) -> None:
    async def scenario() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "fay")
            sandbox = await computers.acquire(user, "t1")
            await sandbox.call({"op": "write", "path": "keep.txt", "content": "kept"})
            await computers.destroy(user)
            assert not sandbox.alive()
            try:
                await sandbox.run("true")
                raise AssertionError("a destroyed sandbox still ran a command")
            except SandboxError:
                pass
            rebuilt = await computers.acquire(user, "t1")
            assert rebuilt is not sandbox
            assert (await rebuilt.call({"op": "read", "path": "keep.txt"}))["text"] == "kept"

    asyncio.run(scenario())


def test_a_file_received_while_the_computer_sleeps_is_there_when_it_wakes(
    tmp_path: Path, database: Database
) -> None:
    """A channel saves a received file into ~/inbox/ while the computer sleeps (its home only
    a snapshot): waking restores the snapshot and keeps that file, owned by the computer's
    user; the restore used to replace the home and lose it."""

    async def scenario() -> None:
        with computers_for(tmp_path, database=database) as computers:
            user = new_user(database, "gus")
            sandbox = await computers.acquire(user, "turn-1")
            await sandbox.run("mkdir -p inbox && echo before > inbox/old.txt && echo x > a.txt")
            await computers.release("turn-1")
            assert await computers.deep_sleep(user) is True
            home = computers.home(user)
            assert not home.exists()

            write_new_file(home, "inbox", "abc-0-report.pdf", b"%PDF arrived")
            woken = await computers.acquire(user, "turn-2")
            listing = await woken.run("cat a.txt inbox/old.txt inbox/abc-0-report.pdf")
            assert listing.exit_code == 0
            got = await woken.call({"op": "read", "path": "inbox/abc-0-report.pdf"})
            assert got["text"] == "%PDF arrived"
            assert (home / "inbox" / "old.txt").read_text() == "before\n"
            assert (home / "a.txt").read_text() == "x\n"
            uid = (home / "a.txt").stat().st_uid
            assert (home / "inbox" / "abc-0-report.pdf").stat().st_uid == uid
            assert (home / "inbox").stat().st_uid == uid
            await computers.release("turn-2")

    asyncio.run(scenario())
