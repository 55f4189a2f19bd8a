"""The memory routes against a real server process, on SQLite and PostgreSQL: the owner lists,
searches, edits and deletes facts, log entries and skills; another user's items answer 404;
bad input answers 422 saying what was wrong; the CLI and the memory page work over them."""

from __future__ import annotations

import os
import subprocess
import time

from nightowl.memory.worklog import write_entry
from nightowl.store.database import Database
from tests.server import NIGHTOWL, ServerProcess


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**server.env, "NIGHTOWL_TOKEN": server.token}
    return subprocess.run(
        [NIGHTOWL, "memory", "--url", server.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_owner_sees_and_corrects_facts(server: ServerProcess) -> None:
    with server.client() as client:
        made = client.post("/v1/memory/facts", json={"text": "Likes green tea"})
        assert made.status_code == 201, made.text
        fact = made.json()
        assert (fact["trust"], fact["created_by"]) == ("owner", "owner")
        assert [f["text"] for f in client.get("/v1/memory/facts").json()] == ["Likes green tea"]

        edited = client.patch(f"/v1/memory/facts/{fact['id']}", json={"text": "Likes oolong"})
        assert edited.json()["text"] == "Likes oolong"
        archived = client.patch(f"/v1/memory/facts/{fact['id']}", json={"archived": True})
        assert archived.json()["archived"] is True
        assert client.get("/v1/memory/facts").json() == []
        assert len(client.get("/v1/memory/facts?archived=true").json()) == 1
        client.patch(f"/v1/memory/facts/{fact['id']}", json={"archived": False})

        hits = client.get("/v1/memory/search", params={"q": "oolong"}).json()
        assert [(h["kind"], h["id"]) for h in hits] == [("fact", fact["id"])]
        summary = client.get("/v1/memory").json()
        assert summary["facts"] == 1 and summary["max_facts"] == 100

        # Bad input: 422 with what was wrong.
        empty = client.post("/v1/memory/facts", json={"text": ""})
        assert empty.status_code == 422 and "text" in empty.json()["error"]["message"]
        long = client.post("/v1/memory/facts", json={"text": "x" * 501})
        assert long.status_code == 422
        nothing = client.patch(f"/v1/memory/facts/{fact['id']}", json={})
        assert nothing.status_code == 422
        assert "send 'text' and/or 'archived'" in nothing.json()["error"]["message"]
        bad_kind = client.get("/v1/memory/search", params={"q": "x", "kind": "secrets"})
        assert bad_kind.status_code == 422 and "kind" in bad_kind.json()["error"]["message"]

        # Another user sees none of it and cannot touch it.
        with server.client(token=server.member_token(f"m-{time.monotonic_ns()}")) as other:
            assert other.get("/v1/memory/facts").json() == []
            assert other.get("/v1/memory/search", params={"q": "oolong"}).json() == []
            assert (
                other.patch(f"/v1/memory/facts/{fact['id']}", json={"text": "x"}).status_code == 404
            )
            assert other.delete(f"/v1/memory/facts/{fact['id']}").status_code == 404

        assert client.delete(f"/v1/memory/facts/{fact['id']}").status_code == 204
        assert client.delete(f"/v1/memory/facts/{fact['id']}").status_code == 404


def test_skills_and_the_profile_bound_over_http(server: ServerProcess) -> None:
    with server.client() as client:
        made = client.post(
            "/v1/memory/skills",
            json={"name": "file-expenses", "description": "Filing expenses.", "body": "1. Open"},
        )
        assert made.status_code == 201, made.text
        skill = made.json()
        assert skill["approved"] is True  # the owner's own skill
        bad = client.post(
            "/v1/memory/skills", json={"name": "Bad Name", "description": "x", "body": "y"}
        )
        assert bad.status_code == 422 and "lowercase" in bad.json()["error"]["message"]
        changed = client.patch(f"/v1/memory/skills/{skill['id']}", json={"body": "1. Open it"})
        assert changed.json()["body"] == "1. Open it"
        with server.client(token=server.member_token(f"s-{time.monotonic_ns()}")) as other:
            assert other.get(f"/v1/memory/skills/{skill['id']}").status_code == 404
        assert client.delete(f"/v1/memory/skills/{skill['id']}").status_code == 204

        start = len(client.get("/v1/memory/facts").json())
        for n in range(100 - start):
            assert client.post("/v1/memory/facts", json={"text": f"f{n}"}).status_code == 201
        full = client.post("/v1/memory/facts", json={"text": "one more"})
        assert full.status_code == 422
        assert "the profile is full (100 of 100 facts" in full.json()["error"]["message"]
        for fact in client.get("/v1/memory/facts").json():
            client.delete(f"/v1/memory/facts/{fact['id']}")


def test_the_memory_cli(server: ServerProcess) -> None:
    added = _cli(server, "facts", "add", "Works from Lisbon")
    assert added.returncode == 0, added.stderr
    listed = _cli(server, "facts", "list")
    assert "Works from Lisbon" in listed.stdout and "owner" in listed.stdout
    fact_id = listed.stdout.split()[0]
    found = _cli(server, "search", "lisbon", "--kind", "fact")
    assert "Works from Lisbon" in found.stdout
    assert _cli(server, "facts", "delete", fact_id).stdout.strip() == f"deleted {fact_id}"
    missing = _cli(server, "facts", "delete", fact_id)
    assert missing.returncode == 2 and f"no fact {fact_id}" in missing.stderr
    empty = _cli(server, "facts", "add", "   ")
    assert empty.returncode == 2 and "needs some text" in empty.stderr
    assert _cli(server, "log", "list").stdout.strip() == "(nothing)"
    unreachable = subprocess.run(
        [NIGHTOWL, "memory", "--url", "http://127.0.0.1:9", "notes"],
        env={**os.environ, **server.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 2 and "cannot reach the server" in unreachable.stderr


def test_the_memory_page_is_served(server: ServerProcess) -> None:
    with server.client() as client:
        page = client.get("/memory")
        assert page.status_code == 200 and "Profile facts" in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert client.get("/app/memory.js").status_code == 200


def test_the_owner_corrects_the_work_log_and_no_one_else_can(server: ServerProcess) -> None:
    with server.client() as client:
        owner = client.get("/v1/me").json()["id"]
    database = Database(server.env["NIGHTOWL_DATABASE_URL"])
    try:
        with database.write() as session:
            entry = write_entry(session, owner, "Booked the dentist for Tuesday.")
    finally:
        database.dispose()
    with server.client() as client:
        assert [e["summary"] for e in client.get("/v1/memory/log").json()] == [
            "Booked the dentist for Tuesday."
        ]
        fixed = client.patch(f"/v1/memory/log/{entry.id}", json={"summary": "Booked it for Wed."})
        assert fixed.status_code == 200 and fixed.json()["summary"] == "Booked it for Wed."
        empty = client.patch(f"/v1/memory/log/{entry.id}", json={"summary": ""})
        assert empty.status_code == 422 and "summary" in empty.json()["error"]["message"]
        with server.client(token=server.member_token(f"l-{time.monotonic_ns()}")) as other:
            assert other.get("/v1/memory/log").json() == []
            edit = other.patch(f"/v1/memory/log/{entry.id}", json={"summary": "x"})
            assert edit.status_code == 404
            assert other.delete(f"/v1/memory/log/{entry.id}").status_code == 404
        assert client.delete(f"/v1/memory/log/{entry.id}").status_code == 204
        assert client.get("/v1/memory/log").json() == []


def test_the_owner_sees_the_history_and_reverts_over_http_and_the_cli(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        fact = client.post("/v1/memory/facts", json={"text": "Drives a blue car"}).json()
        client.patch(f"/v1/memory/facts/{fact['id']}", json={"text": "Drives a red car"})
        client.patch(f"/v1/memory/facts/{fact['id']}", json={"archived": True})
        changes = client.get("/v1/memory/history", params={"item_id": fact["id"]}).json()
        assert [c["action"] for c in changes] == ["archived", "changed", "added"]
        assert {c["author"] for c in changes} == {"owner"}
        assert changes[1]["before"]["text"] == "Drives a blue car"
        assert changes[1]["after"]["text"] == "Drives a red car"

        # The edit cannot be undone while the archive after it stands …
        refused = client.post("/v1/memory/revert", json={"change": changes[1]["id"]})
        assert refused.status_code == 422
        assert f"changed after change {changes[1]['id']}" in refused.json()["error"]["message"]
        # … bad requests say what to send; another user's change is not found.
        both = client.post("/v1/memory/revert", json={"change": 1, "turn_id": "turn_x"})
        assert both.status_code == 422 and "exactly one" in both.json()["error"]["message"]
        nothing = client.post("/v1/memory/revert", json={"turn_id": "turn_none"})
        assert nothing.status_code == 422
        assert "no memory change" in nothing.json()["error"]["message"]
        with server.client(token=server.member_token(f"h-{time.monotonic_ns()}")) as other:
            assert other.get("/v1/memory/history").json() == []
            stolen = other.post("/v1/memory/revert", json={"change": changes[0]["id"]})
            assert stolen.status_code == 404

    shown = _cli(server, "history", fact["id"])
    assert shown.returncode == 0, shown.stderr
    assert "archived 'Drives a red car'" in shown.stdout
    assert "changed 'Drives a blue car' -> 'Drives a red car'" in shown.stdout
    assert _cli(server, "revert", str(changes[0]["id"])).returncode == 0
    assert _cli(server, "revert", str(changes[1]["id"])).returncode == 0
    neither = _cli(server, "revert")
    assert neither.returncode == 2 and "give one change number" in neither.stderr
    with server.client() as client:
        (now,) = [f for f in client.get("/v1/memory/facts").json() if f["id"] == fact["id"]]
    assert now["text"] == "Drives a blue car" and now["archived"] is False
