"""A user's daily budget covers all of their conversations: a member who opens new ones cannot
spend without bound (SQLite and PostgreSQL, against the real server process)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

# Each call costs $0.90 (the scripted model's usage at these prices).
USAGE = {"input_tokens": 80, "cache_read_tokens": 20, "output_tokens": 10}
PRICES = {"scripted": {"input": 10_000, "cache_read": 5_000, "output": 0}}


def _replies(client: httpx.Client, conversation: str) -> list[str]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m["body"] for m in page["messages"] if m["role"] != "user"]


def _ask(client: httpx.Client) -> str:
    conversation: str = client.post("/v1/conversations", json={}).json()["id"]
    client.post(
        f"/v1/conversations/{conversation}/messages", json={"client_id": "q", "text": "hello"}
    )
    return conversation


def test_new_conversations_do_not_escape_the_users_daily_budget(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(tmp_path / "s.json", [{**say("answer", final=True), "usage": USAGE}])
    env = {
        "NIGHTOWL_PRICES": json.dumps(PRICES),
        "NIGHTOWL_USER_BUDGET_USD": "2",  # each conversation's own budget stays $20
        "NIGHTOWL_MEMORY_PASS": "off",
    }
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        member = server.member_token(f"spender-{time.monotonic_ns()}")
        with server.client(token=member) as client:
            for _ in range(3):  # $2.70 in three conversations, each far below its own budget
                conversation = _ask(client)
                wait_for(lambda c=conversation: _replies(client, c) == ["answer"])
            fourth = _ask(client)
            stopped: list[Any] = wait_for(lambda: _replies(client, fourth), timeout=60)
        with server.client() as owner:  # the owner's own budget is untouched by the member's
            mine = _ask(owner)
            wait_for(lambda: _replies(owner, mine) == ["answer"])
    finally:
        server.stop()
    assert len(stopped) == 1 and "a user's daily budget is $2.00" in stopped[0]
    assert "$2.70" in stopped[0]
