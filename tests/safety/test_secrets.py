"""The secret canary: a secret a tool uses (and echoes, in any common encoding) appears in no
stored model request, message, note, workflow step output or log line; a secret goes over the
network only to its allowed hosts, even in an untainted turn; the CLI and the API manage
secrets (and their hosts) without printing them."""

from __future__ import annotations

import base64
import json
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
from tests.safety.helpers import audit, messages, start, wait_kinds
from tests.server import NIGHTOWL, free_port, say, wait_for

pytestmark = pytest.mark.slow

CANARY = "canary-7Qx9-secret-value-31337"


def encoded_forms(value: str) -> dict[str, str]:
    """The forms a tool commonly echoes a secret in."""
    raw = value.encode()
    return {
        "basic auth of user:secret": base64.b64encode(b"user:" + raw).decode(),
        "basic auth of :secret": base64.b64encode(b":" + raw).decode(),
        "hex": raw.hex(),
        "hex, upper case": raw.hex().upper(),
        "percent-encoded, lower case": "".join(f"%{b:02x}" for b in raw),
        "json-escaped": json.dumps(value, ensure_ascii=True)[1:-1],
    }


@pytest.fixture
def echo_page() -> Iterator[tuple[str, list[str]]]:
    """A web page that echoes its `token` query parameter back, as is and encoded."""
    seen: list[str] = []
    app = FastAPI()

    @app.get("/echo")
    def echo(token: str) -> PlainTextResponse:
        seen.append(token)
        forms = "\n".join(f"{name}: {form}" for name, form in encoded_forms(token).items())
        return PlainTextResponse(f"your token is {token}; keep it safe\n{forms}")

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
            # Tools that keep or show text refuse a reference: no value is stored through them.
            {
                "tool_calls": [
                    {
                        "name": "write_note",
                        "arguments": {"text": "t: {{secret:API_TOKEN}}", "expires_in_minutes": 9},
                    }
                ]
            },
            say("Checked. I used {{secret:API_TOKEN}} for it."),
            say("Checked.", final=True),
        ],
        NIGHTOWL_WEB_FETCH_PRIVATE="true",
    )
    try:
        client = server.client()
        put = client.put(
            "/v1/secrets/API_TOKEN", json={"value": CANARY, "allowed_hosts": ["http://127.0.0.1"]}
        )
        assert put.status_code == 204, put.text
        listed = client.get("/v1/secrets").json()
        assert [(s["name"], s["allowed_hosts"]) for s in listed] == [
            ("API_TOKEN", ["http://127.0.0.1"])
        ]
        assert CANARY not in client.get("/v1/secrets").text
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "check the API with my token"},
        )
        wait_for(lambda: any(m["body"] == "Checked." for m in messages(client, conversation)))
        wait_for(lambda: rows(database_url, "SELECT status FROM turns") == [("done",)])
        assert seen == [CANARY]  # the tool got the value (its host is allowed) ...
        results = [str(p) for (p,) in rows(database_url, "SELECT payload FROM transcript_entries")]
        echoed = next(r for r in results if "your token is" in r)
        assert "your token is [secret:API_TOKEN]" in echoed  # ... redacted in every form
        # The URL, the token as is, and each encoded form.
        assert echoed.count("[secret:API_TOKEN]") == 2 + len(encoded_forms(CANARY))
        assert any("write_note does not take secrets" in r for r in results)
        assert any("send_to_user does not take secrets" in r for r in results)
        assert rows(database_url, "SELECT count(*) FROM memory_notes") == [(0,)]
        bodies = [m["body"] for m in messages(client, conversation)]
        assert not any("secret:" in body for body in bodies)
        server.stop()
        stored = _everything_stored(tmp_path, database_url)
        forms = [CANARY, *encoded_forms(CANARY).values()]
        assert stored and not any(form in text for text in stored for form in forms)
    finally:
        server.stop()


def test_a_secret_goes_over_the_network_only_to_its_allowed_hosts_even_untainted(
    tmp_path: Path, database_url: str, echo_page: tuple[str, list[str]]
) -> None:
    url, seen = echo_page
    fetch = {
        "tool_calls": [
            {"name": "web_fetch", "arguments": {"url": f"{url}/echo?token={{{{secret:KEY}}}}"}}
        ]
    }
    server = start(
        tmp_path, database_url, [fetch, say("done", final=True)], NIGHTOWL_WEB_FETCH_PRIVATE="true"
    )
    try:
        client = server.client()
        # Bound elsewhere: the owner's own request in an untainted turn is still held.
        put = client.put(
            "/v1/secrets/KEY", json={"value": CANARY, "allowed_hosts": ["api.example.com"]}
        )
        assert put.status_code == 204, put.text
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "check the API with my key"},
        )
        log = wait_kinds(client, conversation, "approval_requested", "timed_out")
        held = next(e for e in log if e["kind"] == "approval_requested")
        assert held["tool"] == "web_fetch"
        assert "send the secret KEY to http://127.0.0.1" in held["reason"]
        assert "(api.example.com)" in held["reason"]
        assert seen == []
        wait_for(lambda: rows(database_url, "SELECT status FROM turns") == [("done",)])

        # Bound to the page's host: the same request runs without asking.
        hosts = client.put("/v1/secrets/KEY/hosts", json={"allowed_hosts": ["http://127.0.0.1"]})
        assert hosts.status_code == 200 and hosts.json()["allowed_hosts"] == ["http://127.0.0.1"]
        again = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{again}/messages",
            json={"client_id": "m2", "text": "check the API with my key"},
        )
        wait_for(lambda: seen == [CANARY])
        wait_for(lambda: any(m["body"] == "done" for m in messages(client, again)))
        assert not any(e["kind"] == "approval_requested" for e in audit(client, again))

        bad = client.put("/v1/secrets/KEY/hosts", json={"allowed_hosts": ["*.com"]})
        assert bad.status_code == 422 and "too wide" in bad.text
        short = client.put("/v1/secrets/PIN", json={"value": "123"})
        assert short.status_code == 422 and "at least 4 characters" in short.text
        assert client.put("/v1/secrets/NOPE/hosts", json={"allowed_hosts": []}).status_code == 404
        assert [s["name"] for s in client.get("/v1/secrets").json()] == ["KEY"]
    finally:
        server.stop()


def test_the_cli_sets_lists_and_deletes_secrets_without_printing_them(tmp_path: Path) -> None:
    env = {**os.environ, "NIGHTOWL_DATA_DIR": str(tmp_path / "data")}
    env.pop("NIGHTOWL_DATABASE_URL", None)

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [NIGHTOWL, *args], env=env, input=stdin, capture_output=True, text=True
        )

    made = cli(
        "secrets", "set", "MAIL_PASSWORD", "--allow-host", "IMAP.example.com", stdin=CANARY + "\n"
    )
    assert made.returncode == 0 and "{{secret:MAIL_PASSWORD}}" in made.stdout
    listed = cli("secrets", "list")
    assert "MAIL_PASSWORD" in listed.stdout and CANARY not in listed.stdout + listed.stderr
    assert "hosts: imap.example.com" in listed.stdout
    bound = cli("secrets", "hosts", "MAIL_PASSWORD", "imap.example.com", "http://10.0.0.5")
    assert bound.returncode == 0 and "imap.example.com, http://10.0.0.5" in bound.stdout
    wide = cli("secrets", "hosts", "MAIL_PASSWORD", "*.com")
    assert wide.returncode == 2 and "too wide" in wide.stderr
    short = cli("secrets", "set", "PIN", stdin="123\n")
    assert short.returncode == 2 and "at least 4 characters (this one has 3)" in short.stderr
    assert "PIN" not in cli("secrets", "list").stdout
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
