"""Shared helpers of the safety tests: servers with a scripted model, webhooks, reading back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from nightowl.channels.webhooks import sign
from tests.server import ServerProcess, wait_for


def do(tool: str, **arguments: Any) -> str:
    """A line the worst-case (obeying) scripted model turns into a tool call."""
    return "DO: " + json.dumps({"name": tool, "arguments": arguments})


def start(
    tmp_path: Path,
    database_url: str,
    replies: list[dict[str, Any]],
    *,
    review: dict[str, str] | None = None,
    then: str = "silent",
    **env: str,
) -> ServerProcess:
    """A server whose model (and reviewer) follow a script."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": replies, "then": then, "review": review or {}}))
    settings = {"NIGHTOWL_APPROVAL_TIMEOUT_S": "2", **env}
    return ServerProcess(
        tmp_path / "data", database_url, model=f"scripted:{script}", env=settings
    ).start()


def messages(client: httpx.Client, conversation: str) -> list[dict[str, Any]]:
    """Every message of the conversation, in order."""
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return list(page["messages"])


def audit(client: httpx.Client, conversation: str | None = None) -> list[dict[str, Any]]:
    """The audit log (oldest first), of one conversation or all."""
    params = {"limit": 500, **({"conversation_id": conversation} if conversation else {})}
    return list(reversed(client.get("/v1/audit", params=params).json()))


def turn_done(client: httpx.Client, conversation: str) -> bool:
    """True once the conversation has no turn running or queued."""
    return client.get(f"/v1/conversations/{conversation}").json()["activity"] in ("", None)


def hook(client: httpx.Client, name: str) -> dict[str, str]:
    """A new webhook (its secret, path and conversation)."""
    created = client.post("/v1/hooks", json={"name": name})
    assert created.status_code == 201, created.text
    return dict(created.json())


def deliver(server: ServerProcess, hook: dict[str, str], text: str, delivery: str) -> None:
    """A signed plain-text delivery to the webhook."""
    body = text.encode()
    stamp = str(int(time.time()))
    response = httpx.post(
        f"{server.url}{hook['url_path']}",
        content=body,
        headers={
            "Content-Type": "text/plain",
            "X-Nightowl-Timestamp": stamp,
            "X-Nightowl-Signature": sign(hook["secret"], stamp, body),
            "X-Nightowl-Delivery": delivery,
        },
    )
    assert response.status_code == 202, response.text


def wait_kinds(client: httpx.Client, conversation: str, *kinds: str) -> list[dict[str, Any]]:
    """Wait until the conversation's audit log holds every one of these kinds."""
    return list(
        wait_for(
            lambda: (
                (log := audit(client, conversation))
                and set(kinds) <= {e["kind"] for e in log}
                and log
            ),
            timeout=60,
        )
    )
