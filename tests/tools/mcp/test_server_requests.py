"""A connector's server asks during a call (server-everything inside the sandbox): an
elicitation becomes a question to the owner in the conversation, naming the server, and the
owner's answer reaches the server; sampling is refused until the owner allows it for the
connector, then runs on the conversation's model, recorded like any other call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.computer.sandboxes import UID_BASE
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for
from tests.tools.mcp.servers import EVERYTHING, install_in_home, payloads

# A loaded CI machine (four workers on two cores) may take minutes to start sandboxes and servers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ELICIT = "everything_trigger_elicitation_request"
SAMPLE = "everything_trigger_sampling_request"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _results(database_url: str, tool: str) -> list[dict[str, Any]]:
    found = payloads(rows(database_url, "SELECT payload FROM transcript_entries ORDER BY id"))
    return [p for p in found if p.get("kind") == "tool_result" and p.get("tool_name") == tool]


def _messages(client: httpx.Client, conversation: str) -> list[dict[str, Any]]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return list(page["messages"])


def _server(tmp_path: Path, database_url: str, script: Path, uid_offset: int) -> ServerProcess:
    """A server on the scripted model, its sandboxes without network."""
    return ServerProcess(
        tmp_path / "data",
        database_url,
        model=f"scripted:{script}",
        env={
            "NIGHTOWL_SANDBOX_NETWORK": "none",
            "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + uid_offset),
            "NIGHTOWL_SANDBOX_MEMORY_MB": "1024",
            "NIGHTOWL_MEMORY_PASS": "off",
        },
    ).start()


def _ask(client: httpx.Client, tmp_path: Path, text: str) -> str:
    """Add server-everything as the owner's connector, start a conversation with `text`;
    its id."""
    owner = client.get("/v1/me").json()["id"]
    install_in_home(tmp_path / "data" / "homes" / owner)
    made = client.post("/v1/connectors", json={"name": "everything", "command": EVERYTHING})
    assert made.status_code == 201, made.text
    conversation = str(client.post("/v1/conversations", json={}).json()["id"])
    client.post(
        f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": text}
    )
    return conversation


def _question(client: httpx.Client, conversation: str) -> dict[str, Any] | None:
    """The first message that asks the owner for a connector, if any yet."""
    asks = [m for m in _messages(client, conversation) if "asks:" in m["body"]]
    return asks[0] if asks else None


def _answer_form(
    client: httpx.Client, conversation: str, asked: dict[str, Any], form: dict[str, Any]
) -> None:
    """Send the filled-in form as the answer, then wait for the agent's closing message."""
    answered = client.post(
        f"/v1/conversations/{conversation}/messages/{asked['id']}/answer",
        json={"client_id": "a1", "action": "send", "text": json.dumps(form)},
    )
    assert answered.status_code == 201, answered.text
    wait_for(
        lambda: any(m["body"] == "All done." for m in _messages(client, conversation)),
        timeout=180,
    )


def test_elicitation_asks_the_owner_and_sampling_needs_the_owners_consent(
    tmp_path: Path, database_url: str
) -> None:
    replies = [
        _call("load_tools", query=SAMPLE),
        _call(SAMPLE, prompt="say hi", maxTokens=50),
        _call("load_tools", query=ELICIT),
        _call(ELICIT),
        _call(SAMPLE, prompt="say hi again", maxTokens=50),
        say("All done.", final=True),
    ]
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps({"replies": replies, "sampling": "Hi from the conversation's model."})
    )
    server = _server(tmp_path, database_url, path, 70)
    try:
        with server.client() as client:
            conversation = _ask(client, tmp_path, "try everything's elicitation and sampling")
            asked = wait_for(lambda: _question(client, conversation), timeout=180)
            # While the server waits on the owner, the owner allows sampling ...
            allowed = client.patch("/v1/connectors/everything", json={"sampling": True})
            assert allowed.status_code == 200, allowed.text
            # ... and fills in the form (a draft of its fields) and sends it.
            form = json.loads(asked["controls"]["draft"])
            assert form["firstLine"] == "It was a dark and stormy night."  # defaults filled in
            form["name"] = "Ada Lovelace"
            _answer_form(client, conversation, asked, form)
    finally:
        server.stop()
    # The question named the server and what it asked.
    assert asked["body"].startswith("**The connector everything asks:** Please provide inputs")
    [elicited] = _results(database_url, ELICIT)
    assert "Name: Ada Lovelace" in elicited["text"] and elicited["trust"] == "untrusted"
    refused, sampled = _results(database_url, SAMPLE)
    # Not allowed yet: the server was refused (and said so); then the model answered it.
    assert "not allowed sampling" in refused["text"]
    assert "Hi from the conversation's model." in sampled["text"]
    # The sampling call is recorded (usage and cost count toward the budgets) at its own step.
    recorded = rows(
        database_url,
        "SELECT count(*) FROM model_calls WHERE conversation_id = :c AND step = -3",
        c=conversation,
    )
    assert recorded == [(1,)]


def test_a_helpers_connector_asks_the_owner_in_the_parent_conversation(
    tmp_path: Path, database_url: str
) -> None:
    task = "Try the everything connector's elicitation and report what it answered."
    main = [
        {
            "tool_calls": [
                {"name": "start_helper", "arguments": {"task": task}},
                {
                    "name": "send_to_user",
                    "arguments": {"text": "A helper is on it.", "final": True},
                },
            ]
        },
        say("All done.", final=True),
    ]
    helper = [
        _call("load_tools", query=ELICIT),
        _call(ELICIT),
        _call("report", text="The connector took the form."),
    ]
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"replies": main, "helper": helper, "then": "silent"}))
    server = _server(tmp_path, database_url, path, 72)
    try:
        with server.client() as client:
            conversation = _ask(client, tmp_path, "have a helper try everything's elicitation")
            # The helper's question reaches the owner in the parent conversation ...
            asked = wait_for(lambda: _question(client, conversation), timeout=180)
            form = json.loads(asked["controls"]["draft"])
            form["name"] = "Grace Hopper"
            # ... its answer reaches the server, and the helper's report wakes the agent.
            _answer_form(client, conversation, asked, form)
    finally:
        server.stop()
    assert asked["body"].startswith("**A helper asks**")
    assert "**The connector everything asks:** Please provide inputs" in asked["body"]
    [elicited] = _results(database_url, ELICIT)
    assert "Name: Grace Hopper" in elicited["text"] and elicited["trust"] == "untrusted"
