"""nightowl as an MCP server: another agent, with the SDK's client against `/mcp`, starts a
task and reads its result; a token of another user sees nothing of this user's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def _client(server: ServerProcess, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode="legacy")


async def _call(server: ServerProcess, token: str, tool: str, **arguments: Any) -> Any:
    async with _client(server, token) as client:
        result = await client.call_tool(tool, arguments)
        return result.structured_content, result.is_error, result


def test_another_agent_starts_a_task_and_reads_its_result(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json", [say("The report is ready: 3 items.", final=True)]
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        started, failed, _ = asyncio.run(
            _call(server, server.token, "start_task", text="summarise the report", task_id="t1")
        )
        assert not failed, started
        conversation = started["conversation_id"]

        def result() -> Any:
            found, _, _ = asyncio.run(
                _call(
                    server,
                    server.token,
                    "read_task",
                    conversation_id=conversation,
                    seq=started["seq"],
                )
            )
            return found["status"] == "idle" and found["messages"] and found

        found = wait_for(result, timeout=60)
        assert found["messages"][-1]["text"] == "The report is ready: 3 items."
        # The same task id in the same conversation is the same task (the router dedupes it).
        again, _, _ = asyncio.run(
            _call(
                server,
                server.token,
                "start_task",
                text="summarise the report",
                conversation_id=conversation,
                task_id="t1",
            )
        )
        assert again["duplicate"] and again["message_id"] == started["message_id"]
        listed, _, _ = asyncio.run(_call(server, server.token, "list_conversations"))
        assert conversation in {c["id"] for c in listed["result"]}
        # The owner's token: the task is the owner's own words.
        with server.client() as owner:
            messages = owner.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
        assert messages[0]["trust"] == "owner" and messages[0]["body"] == "summarise the report"

        # Another user's token sees nothing of the owner's, and its tasks are outside text.
        other = server.member_token("mallory")
        listed, _, _ = asyncio.run(_call(server, other, "list_conversations"))
        assert listed["result"] == []
        _, failed, refused = asyncio.run(
            _call(server, other, "read_task", conversation_id=conversation)
        )
        assert failed and "no conversation" in str(refused.content)
        theirs, _, _ = asyncio.run(_call(server, other, "start_task", text="do my thing"))
        with server.client() as owner:
            mine = {c["id"] for c in owner.get("/v1/conversations").json()}
        assert theirs["conversation_id"] not in mine
        # No token, or a wrong one: refused before any tool runs.
        for headers in ({}, {"Authorization": "Bearer nwl_wrong"}):
            answer = httpx2.post(f"{server.url}/mcp", json={}, headers=headers)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] in ("missing_token", "invalid_token")
    finally:
        server.stop()
