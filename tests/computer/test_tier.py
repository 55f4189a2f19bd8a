"""A computer tier: two workers and two computer hosts on one PostgreSQL and a shared S3
store. A user's files follow them across workers and hosts, a computer asleep on one host wakes
on the other, and when a host is SIGKILLed mid-turn the turn finishes on the other host from the
last snapshot, the agent told so."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.channels.base import Inbound
from nightowl.channels.inbound import ChannelInbox
from nightowl.computer.remote import RemoteComputers
from nightowl.engine.routine_firings import RoutineFirings
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.watches import Watch
from nightowl.router.router import Router
from nightowl.store.channels import add_channel, get_channel
from nightowl.store.conversations import create_conversation, list_conversations, messages_after
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.routine_firings import firings_of
from nightowl.store.routines import create_routine
from nightowl.store.users import ensure_owner
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from tests.computer.sandboxes import UID_BASE, new_user
from tests.computer.tier import TOKEN, ComputerHostProcess, s3_server, snapshot_keys
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script
from tests.store.test_store import RecordingQueue

pytestmark = pytest.mark.slow

LEASE_S = "2"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _done(text: str) -> dict[str, Any]:
    return _call("send_to_user", text=text, final=True)


def test_a_host_refuses_requests_without_the_tier_token(tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        host = ComputerHostProcess(
            tmp_path / "host", url, env={"NIGHTOWL_COMPUTER_TOKEN": TOKEN}
        ).start()
        try:
            route = f"{host.url}/v1/computers/someone/acquire"
            for headers in ({}, {"Authorization": "Bearer wrong-token-of-the-same-size-00"}):
                refused = httpx.post(route, json={"holder": "h"}, headers=headers, timeout=10)
                assert refused.status_code == 401
                assert "token" in refused.json()["detail"]
            assert rows(url, "SELECT count(*) FROM computers") == [(0,)]
        finally:
            host.stop()


def _tool_results(url: str, conversation: str) -> list[str]:
    """What the model saw of each computer tool call, in order (the transcript's tool
    results; send_to_user's left out)."""
    found = []
    for (payload,) in rows(
        url,
        "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
        c=conversation,
    ):
        data = payload if isinstance(payload, dict) else json.loads(payload)
        if data["kind"] == "tool_result" and data["tool_name"] != "send_to_user":
            found.append(str(data["text"]))
    return found


def _turns_done(url: str, conversation: str, count: int) -> bool:
    done = rows(
        url,
        "SELECT count(*) FROM turns WHERE conversation_id = :c AND status = 'done'",
        c=conversation,
    )
    return bool(done[0][0] >= count)


def test_files_follow_the_user_across_workers_and_hosts_and_survive_a_host_killed_mid_turn(
    tmp_path: Path,
) -> None:
    script = [
        # turn 1, on worker A (computer on host 1)
        _call("write_file", path="notes.txt", content="written in turn one"),
        _done("wrote"),
        # turn 2, on worker B (the computer stays on host 1, where it is placed)
        _call("read_file", path="notes.txt"),
        _done("read"),
        # turn 3, on worker B, after the computer slept on host 1: it wakes on host 2
        _call("read_file", path="notes.txt"),
        _done("read after sleep"),
        # turn 4: host 2 is killed while the model thinks; the turn ends on host 1
        _call("read_file", path="notes.txt"),
        {"delay": 6, **_call("read_file", path="notes.txt")},
        _call("read_file", path="notes.txt"),
        _call("read_file", path="unsaved.txt"),
        _done("finished"),
    ]
    model = write_script(tmp_path / "script.json", script)
    with fresh_database("postgresql", tmp_path) as url, s3_server(tmp_path) as s3:
        common = {
            **s3,
            "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
            "NIGHTOWL_COMPUTER_LEASE_S": LEASE_S,
            "NIGHTOWL_SANDBOX_NETWORK": "none",
            "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 70),
        }
        host1 = ComputerHostProcess(tmp_path / "h1", url, env=common)
        host2 = ComputerHostProcess(tmp_path / "h2", url, env=common)
        processes: list[ServerProcess] = [host1.start(), host2.start()]
        try:
            tier = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_COMPUTER_LEASE_S": LEASE_S}
            a = ServerProcess(
                tmp_path / "a",
                url,
                model=model,
                executor_id="worker-a",
                env={**tier, "NIGHTOWL_COMPUTER_HOSTS": f"{host1.url},{host2.url}"},
            )
            b = ServerProcess(
                tmp_path / "b",
                url,
                model=model,
                executor_id="worker-b",
                env={**tier, "NIGHTOWL_COMPUTER_HOSTS": f"{host2.url},{host1.url}"},
            )
            processes += [a.start(), b]  # turn 1 runs on worker A alone
            with a.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "1", "text": "one"},
                )
            wait_for(lambda: _turns_done(url, conversation, 1), timeout=90)
            owner = rows(url, "SELECT user_id FROM computers")[0][0]
            assert rows(url, "SELECT host FROM computers") == [(host1.url,)]
            a.stop()  # turn 2 runs on worker B
            b.start()
            with b.client() as client:
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "2", "text": "two"},
                )
            wait_for(lambda: _turns_done(url, conversation, 2), timeout=90)
            results = _tool_results(url, conversation)
            assert "written in turn one" in results[1]
            assert rows(url, "SELECT host FROM computers") == [(host1.url,)]

            # The computer sleeps on host 1 (its home only in the shared store) once worker B
            # lets it go: a turn records its end before it releases its computer, and a held
            # computer never sleeps.
            def sleep_on_host1() -> bool:
                slept = httpx.post(
                    f"{host1.url}/v1/computers/{owner}/sleep",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=60,
                )
                assert slept.status_code == 200, slept.text
                return bool(slept.json()["slept"])

            wait_for(sleep_on_host1, timeout=30)
            assert rows(url, "SELECT state, host FROM computers") == [("asleep", None)]
            assert not (host1.data_dir / "homes" / owner).exists()
            assert snapshot_keys(s3["NIGHTOWL_SNAPSHOT_STORE_ENDPOINT"])
            # … and wakes on host 2 (worker B's first choice) with the same files.
            with b.client() as client:
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "3", "text": "three"},
                )
            wait_for(lambda: _turns_done(url, conversation, 3), timeout=90)
            results = _tool_results(url, conversation)
            assert "written in turn one" in results[2]
            assert "restored from" not in results[2]  # a sleep is no loss
            assert rows(url, "SELECT host FROM computers") == [(host2.url,)]

            # Host 2 dies mid-turn: the turn finishes on host 1 from the last snapshot.
            with b.client() as client:
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "4", "text": "four"},
                )
            wait_for(lambda: len(_tool_results(url, conversation)) == 4, timeout=90)
            # A change made after the last snapshot (the turn's model is thinking) …
            home = host2.data_dir / "homes" / owner
            (home / "unsaved.txt").write_text("never snapshotted")
            os.chown(home / "unsaved.txt", home.stat().st_uid, home.stat().st_gid)
            snapshot_at = rows(url, "SELECT snapshot_at FROM computers")[0][0]
            host2.kill()
            wait_for(lambda: _turns_done(url, conversation, 4), timeout=120)
            results = _tool_results(url, conversation)
            after_kill = results[4:]  # … is lost with its host:
            assert "does not answer" in after_kill[0]  # the call under way when it died
            told = after_kill[1]
            stamp = re.search(r"restored from its snapshot of (\S+) UTC", told)
            assert stamp is not None, told
            assert stamp.group(1) == snapshot_at.isoformat(timespec="seconds")
            assert "written in turn one" in told
            assert "No such file" in after_kill[2]  # written after the last snapshot: lost
            assert rows(url, "SELECT host FROM computers") == [(host1.url,)]
        finally:
            for process in processes:
                process.stop()


def test_a_command_given_up_by_the_worker_is_killed_on_the_host(tmp_path: Path) -> None:
    """A turn preempted (or a worker gone) mid-command: the host sees the request go away and
    kills the command, as a sandbox in the worker's own process would."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    user = new_user(database, "someone")
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 90)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    tier = RemoteComputers([host.url], TOKEN, database, wait_s=30)
    started = tmp_path / "host" / "homes" / user / "started"
    count = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 300'"

    async def scenario() -> None:
        sandbox = await tier.acquire(user, "turn")
        running = asyncio.create_task(sandbox.run("touch started; sleep 300", timeout_s=600))
        await asyncio.to_thread(wait_for, started.exists, 30)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

        async def sleeping() -> int:
            result = await sandbox.run(f"exit $({count})", timeout_s=30)
            return int(result.exit_code or 0)

        deadline = asyncio.get_running_loop().time() + 20
        while await sleeping():
            assert asyncio.get_running_loop().time() < deadline, "the command still runs"
            await asyncio.sleep(0.2)
        await tier.release("turn")

    try:
        asyncio.run(scenario())
    finally:
        host.stop()
        database.dispose()


def test_a_removed_computer_leaves_nothing_on_its_host(tmp_path: Path) -> None:
    """An isolated helper's computer, removed when the helper ends, is removed on the host it
    is placed on: sandbox, home and placement. A computer id that is a path is refused."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    user = new_user(database, "helper")
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 95)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    tier = RemoteComputers([host.url], TOKEN, database, wait_s=30)
    homes = tmp_path / "host" / "homes"

    async def scenario() -> None:
        sandbox = await tier.acquire(user, "helper-run")
        await sandbox.run("echo untrusted > build.log", timeout_s=30)
        await tier.release("helper-run")
        assert (homes / user / "build.log").exists()
        assert tier.placed_host(user) is not None
        await tier.remove(user)

    try:
        asyncio.run(scenario())
        assert not (homes / user).exists()
        assert tier.placed_host(user) is None
        for bad in ("%2E%2E", "..%2Fhomes"):
            refused = httpx.post(
                f"{host.url}/v1/computers/{bad}/remove",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            )
            assert refused.status_code in (404, 422), refused.text
        assert homes.is_dir() and (tmp_path / "host").is_dir()
    finally:
        host.stop()
        database.dispose()


def test_a_file_received_on_a_channel_lands_in_the_computer_on_its_host(tmp_path: Path) -> None:
    """With the computers on a tier, a channel's received file is written into the owner's
    computer on its host (inside it, as its user), not into the receiving worker's disk; one
    the computer cannot take is named in the message as not saved."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    with database.write() as session:
        owner = ensure_owner(session)
        channel = add_channel(session, owner.id, "chat", "matrix", {"owner": "@me:x"})
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 97)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    tier = RemoteComputers([host.url], TOKEN, database, wait_s=30)
    inbox = ChannelInbox(
        database, Router(database, RecordingQueue()), tmp_path / "worker-homes", None, tier.put_file
    )
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    with database.read() as session:
        info = get_channel(session, channel.id)

    def said(n: int) -> str:
        with database.read() as session:
            [conversation] = list_conversations(session, owner.id)
            return messages_after(session, conversation.id, 0)[n].body

    try:
        scan = [("scan.bin", "", data)]
        photo = Inbound("$1", "!dm", "@me:x", "the scan", direct=True, files=scan)
        asyncio.run(inbox.accept(info, [photo], {}))
        kept = re.search(r"~/inbox/(\S+) \(1,048,576 bytes\)", said(0))
        assert kept is not None, said(0)
        on_host = tmp_path / "host" / "homes" / owner.id / "inbox" / kept[1]
        assert on_host.read_bytes() == data
        assert on_host.stat().st_uid != 0  # written by the computer's user
        assert not (tmp_path / "worker-homes").exists()
        # The computer made ~/inbox a file: the next file is refused there, and said so.
        asyncio.run(_run_in(tier, owner.id, "rm -rf inbox && echo x > inbox"))
        again = Inbound("$2", "!dm", "@me:x", "another", direct=True, files=[("b.txt", "", b"b")])
        asyncio.run(inbox.accept(info, [again], {}))
        assert "b.txt (not saved: the computer could not take it)" in said(1)
    finally:
        host.stop()
        database.dispose()


async def _run_in(tier: RemoteComputers, user: str, command: str) -> None:
    sandbox = await tier.acquire(user, "shell")
    await sandbox.run(command, timeout_s=30)
    await tier.release("shell")


def test_a_file_watch_reads_the_file_in_the_computer_on_its_host(tmp_path: Path) -> None:
    """With the computers on a tier, a routine's file watch reads the owner's file inside
    their computer on its host (the worker's own disk has no homes), sees it change, and
    leaves a computer in deep sleep asleep."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    database = Database(url)
    upgrade(database)
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 98)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    tier = RemoteComputers([host.url], TOKEN, database, wait_s=30)
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
        routine = create_routine(
            session,
            owner.id,
            conversation.id,
            name="todo",
            prompt="tell me what changed in my list",
            cron="*/5 * * * *",
            timezone="UTC",
            created_by="owner",
            watch=Watch(kind="file", target="notes/todo.md"),
        )
    checks = WatchChecks(
        database,
        tmp_path / "worker-homes",
        PinnedFetcher(AddressPolicy()),
        computers=tier,
    )
    router = Router(database, RecordingQueue())
    now = {"at": datetime.now(UTC)}
    firings = RoutineFirings(database, router, lambda: now["at"], checks)

    def fire() -> int:
        now["at"] += timedelta(minutes=5)
        return firings.fire_due(routine.id, now["at"].replace(second=0, microsecond=0))

    def last() -> tuple[str, str]:
        with database.read() as session:
            latest = firings_of(session, routine.id)[0]
            return latest.outcome, latest.reason

    try:
        assert fire() == 0 and last()[1].startswith("nothing changed: first check")  # missing
        asyncio.run(_run_in(tier, owner.id, "mkdir -p notes && echo '- buy milk' > notes/todo.md"))
        assert fire() == 1
        with database.read() as session:
            change = messages_after(session, conversation.id, 0)[-1]
        assert change.trust == "untrusted"
        assert "+- buy milk" in change.body
        assert fire() == 0 and last() == ("skipped", "nothing changed")
        assert not (tmp_path / "worker-homes").exists()
        # Asleep on the tier: its home is a snapshot; the watch does not wake it.
        assert asyncio.run(tier.deep_sleep(owner.id))
        assert not (tmp_path / "host" / "homes" / owner.id).exists()
        assert fire() == 0 and last()[1].startswith("nothing changed: the computer is asleep")
        assert tier.placed_host(owner.id) is None
        assert not (tmp_path / "host" / "homes" / owner.id).exists()
    finally:
        checks.close()
        host.stop()
        database.dispose()
