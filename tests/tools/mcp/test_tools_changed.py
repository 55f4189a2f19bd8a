"""A connector's server changes its tools during a conversation (`tools/list_changed`): the
new tool is held until the owner approves it (connector pins); once approved, the
conversation hears of it in a note in its newest message, and the cached prefix (system
prompt, catalogue, loaded schemas) is sent exactly as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.fake_providers import FakeProvider, openai_reply
from tests.server import ServerProcess, wait_for
from tests.tools.mcp.servers import INSIDE, install_in_home

# A loaded CI machine (four workers on two cores) may take minutes to start sandboxes and servers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# A server whose `unlock` tool adds a tool and tells the client its tools changed.
SHIFTY = '''
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("shifty")
READ = ToolAnnotations(readOnlyHint=True)


def secret() -> str:
    """Tell the secret."""
    return "the secret is 42"


@server.tool(annotations=READ)
def ping() -> str:
    """Answer pong."""
    return "pong"


@server.tool(annotations=READ)
async def unlock(ctx: Context) -> str:
    """Unlock the secret tool."""
    server.add_tool(secret, name="secret", annotations=READ)
    await ctx.session.send_tool_list_changed()
    return "unlocked"


server.run("stdio")
'''


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return openai_reply(tool=(name, json.dumps(arguments)))


def test_a_changed_tool_list_reaches_the_conversation_as_a_note_not_a_cache_break(
    tmp_path: Path, database_url: str
) -> None:
    with FakeProvider() as fake:
        fake.answers = [
            (200, _call("load_tools", query="shifty")),
            (200, _call("load_tools", query="shifty_unlock")),
            (200, _call("shifty_unlock")),
            (200, _call("send_to_user", text="Unlocked.", final=True)),
            (200, _call("send_to_user", text="Noted.", final=True)),
        ]
        server = ServerProcess(
            tmp_path / "data",
            database_url,
            model=f"openai-compatible:{fake.url}/v1#fake",
            env={"NIGHTOWL_SANDBOX_NETWORK": "none", "NIGHTOWL_MEMORY_PASS": "off"},
        ).start()
        try:
            with server.client() as client:
                owner = client.get("/v1/me").json()["id"]
                home = tmp_path / "data" / "homes" / owner
                install_in_home(home)
                (home / "shifty.py").write_text(SHIFTY)
                command = ["env", f"PYTHONPATH={INSIDE}/python", "python3", "shifty.py"]
                made = client.post("/v1/connectors", json={"name": "shifty", "command": command})
                assert made.status_code == 201, made.text
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m1", "text": "unlock shifty"},
                )

                def replied(text: str) -> bool:
                    page = client.get(f"/v1/conversations/{conversation}/messages").json()
                    return any(m["body"] == text for m in page["messages"])

                wait_for(lambda: replied("Unlocked."), timeout=180)
                held = client.get("/v1/connectors/shifty").json()
                approved = client.post("/v1/connectors/shifty/approve", json={"tools": None})
                assert approved.status_code == 200, approved.text
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m2", "text": "thanks"},
                )
                wait_for(lambda: replied("Noted."), timeout=180)
                stored = client.get("/v1/connectors/shifty").json()
        finally:
            server.stop()
    requests = fake.requests
    assert len(requests) == 5
    # The new tool was held (not offered) until the owner approved it ...
    assert held["held"] == ["secret"] and stored["held"] == []
    assert "shifty_secret" not in json.dumps(requests[3])
    before, after = requests[3], requests[4]
    # ... then the conversation is told in its newest message ...
    assert "secret" in {t["name"] for t in stored["tools"]}
    newest = after["messages"][-1]
    assert "Connector shifty has new tools: shifty_secret" in json.dumps(newest)
    assert "shifty_secret" not in json.dumps(before)
    # ... while what the provider caches is sent as before: the system prompt and catalogue,
    # the loaded schemas, and the history up to the previous request's newest note.
    assert after["messages"][0] == before["messages"][0]
    assert after["tools"] == before["tools"]
    assert after["messages"][: len(before["messages"]) - 1] == before["messages"][:-1]
    breaks = rows(
        database_url,
        "SELECT cache_break FROM model_calls WHERE step >= 0 AND cache_break IS NOT NULL "
        "AND (cache_break_explained IS NULL OR cache_break_explained = false)",
    )
    assert breaks == []
