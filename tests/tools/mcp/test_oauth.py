"""OAuth 2.1 for a connector reached by URL, end to end against a local authorisation server
built with the SDK's server-side auth: the owner authorises (dynamic client registration,
PKCE, the browser sent back to nightowl), the agent calls the connector, an expired access
token is refreshed, and a revoked authorisation makes the agent tell the owner."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script
from tests.tools.mcp.oauth_server import OAuthMcpServer
from tests.tools.mcp.servers import payloads

# A loaded CI machine (four workers on two cores) may take minutes to start sandboxes and servers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOOL = "notes_latest_note"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _results(database_url: str) -> list[dict[str, Any]]:
    found = payloads(rows(database_url, "SELECT payload FROM transcript_entries ORDER BY id"))
    return [p for p in found if p.get("kind") == "tool_result" and p.get("tool_name") == TOOL]


def _ask(client: httpx.Client, conversation: str, text: str, reply: str) -> None:
    sent = client.post(
        f"/v1/conversations/{conversation}/messages",
        json={"client_id": f"m{len(text)}", "text": text},
    )
    assert sent.status_code in (200, 201, 202), sent.text

    def replied() -> bool:
        page = client.get(f"/v1/conversations/{conversation}/messages").json()
        return any(m["body"] == reply for m in page["messages"])

    wait_for(replied, timeout=180)


def test_authorise_call_refresh_and_a_revoked_authorisation_reaches_the_owner(
    tmp_path: Path, database_url: str
) -> None:
    script = write_script(
        tmp_path / "script.json",
        [
            _call("load_tools", query=TOOL),
            _call(TOOL),
            say("Read it.", final=True),
            _call(TOOL),
            say("Read it again.", final=True),
            _call(TOOL),
            say("The notes connector needs you to authorise it again.", final=True),
        ],
    )
    access_s = 4
    with OAuthMcpServer(access_s=access_s) as notes:
        server = ServerProcess(
            tmp_path / "data", database_url, model=script, env={"NIGHTOWL_MEMORY_PASS": "off"}
        ).start()
        try:
            with server.client() as client:
                made = client.post(
                    "/v1/connectors", json={"name": "notes", "url": notes.url, "auth": "oauth"}
                )
                assert made.status_code == 201, made.text
                started = client.post("/v1/connectors/notes/authorize", timeout=60)
                assert started.status_code == 200, started.text
                url = started.json()["authorize_url"]
                assert url.startswith(f"http://127.0.0.1:{notes.port}/authorize?")
                assert "code_challenge_method=S256" in url  # PKCE
                # The owner opens it; the service sends the browser back to nightowl.
                page = httpx.get(url, follow_redirects=True, timeout=60)
                assert page.status_code == 200, page.text
                assert "nightowl may now use notes (1 tools)" in page.text
                assert len(notes.authorization.clients) == 1  # registered dynamically
                stored = client.get("/v1/connectors/notes").json()
                assert stored["status"] == "ok"
                secrets = {s["name"] for s in client.get("/v1/secrets").json()}
                assert {"connector.notes.access", "connector.notes.refresh"} <= secrets

                conversation = client.post("/v1/conversations", json={}).json()["id"]
                _ask(client, conversation, "what's my latest note?", "Read it.")
                # The access token expires; the next call refreshes it first.
                time.sleep(access_s + 0.5)
                _ask(client, conversation, "and now, please?", "Read it again.")
                assert notes.authorization.refreshed >= 1
                # The owner withdraws nightowl's access at the service.
                notes.authorization.revoke_everything()
                _ask(
                    client,
                    conversation,
                    "once more?",
                    "The notes connector needs you to authorise it again.",
                )
                after = client.get("/v1/connectors/notes").json()
        finally:
            server.stop()
    first, second, revoked = _results(database_url)
    assert "water the plants" in first["text"] and not first.get("is_error")
    assert "water the plants" in second["text"] and not second.get("is_error")
    assert revoked.get("is_error")
    assert "needs the owner to authorise it again" in revoked["text"]
    assert "nightowl connectors authorize notes" in revoked["text"]
    assert after["status"] == "authorize"
