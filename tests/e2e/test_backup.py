"""Backup, wipe, restore, continue: a real server's conversation and computer come back.

A scripted turn writes a file in the owner's computer; `nightowl backup` runs while the server
is up; the server stops, its database and data dir are wiped; `nightowl restore` brings them
back; a restarted server answers a new message in the old conversation, and that turn reads
the file back from the computer.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.computer.tier import empty_bucket, s3_server, snapshot_keys
from tests.databases import PG_ADMIN
from tests.e2e.store_view import forget, rows
from tests.server import NIGHTOWL, ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def _nightowl(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NIGHTOWL, *args], env=server.env, capture_output=True, text=True, check=False
    )


def _wipe(server: ServerProcess, url: str) -> None:
    """Lose everything: the data dir, and the database (PostgreSQL: dropped, made anew)."""
    shutil.rmtree(server.data_dir)
    forget(url)
    if url.startswith("sqlite"):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{make_url(url).database}{suffix}").unlink(missing_ok=True)
        return
    name = make_url(url).database
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")


def _shell(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}


def _bodies(server: ServerProcess, conversation: str) -> list[str]:
    with server.client() as client:
        listed = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m["body"] for m in listed["messages"]]


def test_a_restored_server_continues_the_conversation_with_the_computers_files(
    tmp_path: Path, backend_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            # `rev` makes the file's text appear nowhere in the commands themselves.
            {
                "tool_calls": [
                    {"name": "shell", "arguments": {"command": "echo kept | rev > n.txt"}}
                ]
            },
            say("saved", final=True),
            {"tool_calls": [{"name": "shell", "arguments": {"command": "cat n.txt"}}]},
            say("read it back", final=True),
        ],
    )
    server = ServerProcess(tmp_path / "data", backend_url, model=model).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m1", "text": "keep a note"},
            )
            # Memory's history goes with the backup: a fact and the owner's correction.
            fact = client.post("/v1/memory/facts", json={"text": "Lives in Berlin"}).json()
            edited = client.patch(f"/v1/memory/facts/{fact['id']}", json={"text": "Lives in Bonn"})
            assert edited.status_code == 200, edited.text
            history = client.get("/v1/memory/history").json()
            assert [c["action"] for c in history] == ["changed", "added"]
        wait_for(lambda: "saved" in _bodies(server, conversation), timeout=90)
        homes = server.data_dir / "homes"
        (note,) = homes.glob("*/n.txt")
        owner_uid = note.stat().st_uid
        archive = tmp_path / "nightowl.backup"
        made = _nightowl(server, "backup", str(archive))  # while the server runs
        assert made.returncode == 0, made.stderr
        assert "holds the vault key" in made.stdout
        assert archive.stat().st_mode & 0o077 == 0  # it holds the vault key: owner only
    finally:
        server.stop()

    refused = _nightowl(server, "restore", str(archive))
    assert refused.returncode == 2 and "--force" in refused.stderr

    _wipe(server, backend_url)
    restored = _nightowl(server, "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    (note,) = homes.glob("*/n.txt")
    assert note.read_text() == "tpek\n" and note.stat().st_uid == owner_uid

    server.start()
    try:
        assert _bodies(server, conversation)[-1] == "saved"
        with server.client() as client:
            assert client.get("/v1/memory/history").json() == history
            undone = client.post("/v1/memory/revert", json={"change": history[0]["id"]})
            assert undone.status_code == 200, undone.text
            facts = client.get("/v1/memory/facts").json()
            assert [f["text"] for f in facts] == ["Lives in Berlin"]
            sent = client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m2", "text": "what did you keep?"},
            )
            assert sent.status_code in (200, 201, 202), sent.text
        wait_for(lambda: _bodies(server, conversation)[-1] == "read it back", timeout=90)
        entries = [
            str(payload)
            for (payload,) in rows(
                backend_url,
                "SELECT payload FROM transcript_entries WHERE conversation_id = :c",
                c=conversation,
            )
        ]
        # Only the second turn's `cat` can have put the file's text into the transcript.
        assert any("tpek" in entry for entry in entries), entries
    finally:
        server.stop()


def test_a_backup_keeps_the_computers_snapshots_of_a_shared_store(
    tmp_path: Path, backend_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            _shell("echo kept | rev > n.txt"),
            say("saved", final=True),
            _shell("cat n.txt"),
            say("read it back", final=True),
        ],
    )
    with s3_server(tmp_path) as s3:
        endpoint = s3["NIGHTOWL_SNAPSHOT_STORE_ENDPOINT"]
        # The computer sleeps as soon as the turn lets it go: its home is then a snapshot,
        # uploaded to the shared store.
        env = {**s3, "NIGHTOWL_SANDBOX_IDLE_SLEEP_S": "0.5"}
        server = ServerProcess(tmp_path / "data", backend_url, model=model, env=env).start()
        try:
            with server.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m1", "text": "keep a note"},
                )
            wait_for(lambda: "saved" in _bodies(server, conversation), timeout=90)
            asleep = "SELECT state FROM computers"
            wait_for(lambda: rows(backend_url, asleep) == [("asleep",)], timeout=60)
            (key,) = snapshot_keys(endpoint)
            archive = tmp_path / "nightowl.backup"
            made = _nightowl(server, "backup", str(archive))
            assert made.returncode == 0, made.stderr
            assert "1 computer snapshot(s) from s3://snapshots/tier" in made.stdout
        finally:
            server.stop()

        _wipe(server, backend_url)
        empty_bucket(endpoint)
        without_store = {
            k: v for k, v in server.env.items() if not k.startswith("NIGHTOWL_SNAPSHOT_STORE")
        }
        refused = subprocess.run(
            [NIGHTOWL, "restore", str(archive)],
            env=without_store,
            capture_output=True,
            text=True,
            check=False,
        )
        assert refused.returncode == 2
        assert "set NIGHTOWL_SNAPSHOT_STORE" in refused.stderr, refused.stderr
        assert not server.data_dir.exists()  # refused before anything was written

        restored = _nightowl(server, "restore", str(archive))
        assert restored.returncode == 0, restored.stderr
        assert "1 computer snapshot(s) put back" in restored.stdout
        assert snapshot_keys(endpoint) == [key]
        # On a computer tier the worker's data dir holds no snapshot: without the local copy,
        # the computer can wake only from the shared store.
        shutil.rmtree(server.data_dir / "blobs")

        server.start()
        try:
            with server.client() as client:
                sent = client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m2", "text": "what did you keep?"},
                )
                assert sent.status_code in (200, 201, 202), sent.text
            wait_for(lambda: _bodies(server, conversation)[-1] == "read it back", timeout=90)
            entries = [
                str(payload)
                for (payload,) in rows(
                    backend_url,
                    "SELECT payload FROM transcript_entries WHERE conversation_id = :c",
                    c=conversation,
                )
            ]
            assert any("tpek" in entry for entry in entries), entries
        finally:
            server.stop()
