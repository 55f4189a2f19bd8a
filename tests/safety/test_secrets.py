"""The secret canary: a secret a tool uses (and echoes) appears in no stored model request,
message, workflow step output or log line; the CLI manages secrets without printing them."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from tests.e2e.store_view import rows
from tests.safety.helpers import messages, start
from tests.server import NIGHTOWL, free_port, say, wait_for

pytestmark = pytest.mark.slow

CANARY = "canary-7Qx9-secret-value-31337"


@pytest.fixture
def echo_page() -> Iterator[tuple[str, list[str]]]:
    """A web page that echoes its `token` query parameter back."""
    seen: list[str] = []
    app = FastAPI()

    @app.get("/echo")
    def echo(token: str) -> PlainTextResponse:
        seen.append(token)
        return PlainTextResponse(f"your token is {token}; keep it safe")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    thread.join(timeout=5)


def _everything_stored(root: Path, database_url: str) -> list[str]:
    """Every byte the server stored: every file under the test's folder (the SQLite app store
    and DBOS history, logs, blobs), and on
    PostgreSQL every row of every table (app store and DBOS history)."""
    found = [p.read_bytes().decode("latin-1") for p in root.rglob("*") if p.is_file()]
    if database_url.startswith("postgresql"):
        url = database_url.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(url) as connection:
            tables = connection.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE "
                "table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
            for schema, table in tables:
                found += [
                    str(r[0])
                    for r in connection.execute(
                        f'SELECT CAST(t AS text) FROM "{schema}"."{table}" t'
                    ).fetchall()
                ]
    return found


def test_a_secret_used_and_echoed_by_a_tool_is_stored_nowhere(
    tmp_path: Path, database_url: str, echo_page: tuple[str, list[str]]
) -> None:
    url, seen = echo_page
    server = start(
        tmp_path,
        database_url,
        [
            {
                "tool_calls": [
                    {
                        "name": "web_fetch",
                        "arguments": {"url": f"{url}/echo?token={{{{secret:API_TOKEN}}}}"},
                    }
                ]
            },
            say("Checked. I used {{secret:API_TOKEN}} for it.", final=True),
        ],
        NIGHTOWL_WEB_FETCH_PRIVATE="true",
    )
    try:
        client = server.client()
        put = client.put("/v1/secrets/API_TOKEN", json={"value": CANARY})
        assert put.status_code == 204, put.text
        assert [s["name"] for s in client.get("/v1/secrets").json()] == ["API_TOKEN"]
        assert CANARY not in client.get("/v1/secrets").text
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "check the API with my token"},
        )
        wait_for(
            lambda: any(m["body"].startswith("Checked.") for m in messages(client, conversation))
        )
        wait_for(lambda: rows(database_url, "SELECT status FROM turns") == [("done",)])
        assert seen == [CANARY]  # the tool got the value ...
        results = [str(p) for (p,) in rows(database_url, "SELECT payload FROM transcript_entries")]
        assert any("your token is [secret:API_TOKEN]" in r for r in results)  # ... redacted
        bodies = [m["body"] for m in messages(client, conversation)]
        assert "Checked. I used {{secret:API_TOKEN}} for it." in bodies  # a reference stays one
        server.stop()
        stored = _everything_stored(tmp_path, database_url)
        assert stored and not any(CANARY in text for text in stored)
    finally:
        server.stop()


def test_the_cli_sets_lists_and_deletes_secrets_without_printing_them(tmp_path: Path) -> None:
    env = {**os.environ, "NIGHTOWL_DATA_DIR": str(tmp_path / "data")}
    env.pop("NIGHTOWL_DATABASE_URL", None)

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [NIGHTOWL, *args], env=env, input=stdin, capture_output=True, text=True
        )

    made = cli("secrets", "set", "MAIL_PASSWORD", stdin=CANARY + "\n")
    assert made.returncode == 0 and "{{secret:MAIL_PASSWORD}}" in made.stdout
    listed = cli("secrets", "list")
    assert "MAIL_PASSWORD" in listed.stdout and CANARY not in listed.stdout + listed.stderr
    assert (tmp_path / "data" / "secret.key").stat().st_mode & 0o777 == 0o600
    bad = cli("secrets", "set", "bad name", stdin="x")
    assert bad.returncode == 2 and "letters, digits" in bad.stderr
    assert cli("secrets", "delete", "MAIL_PASSWORD").returncode == 0
    gone = cli("secrets", "delete", "MAIL_PASSWORD")
    assert gone.returncode == 2 and "no secret named" in gone.stderr
    assert "the audit log is empty" in cli("audit").stdout
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes()
