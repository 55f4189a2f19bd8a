"""Model calls carry their cost; a conversation's daily budget stops work with one message;
`GET /v1/usage` and `nightowl usage` report real numbers (the scripted model's usage, priced
by an override); on SQLite and PostgreSQL, against the real server process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

USAGE = {"input_tokens": 80, "cache_read_tokens": 20, "output_tokens": 10}
# $10,000 per million input tokens, $5,000 per million cached: each call costs $0.90.
PRICES = {"scripted": {"input": 10_000, "cache_read": 5_000, "output": 0}}
BUDGET_MESSAGE = "daily budget is $2.00"


def _reply(text: str) -> dict[str, Any]:
    return {**say(text, final=True), "usage": USAGE}


def _bodies(client: Any, conversation: str) -> list[str]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m["body"] for m in page["messages"] if m["role"] != "user"]


def test_the_budget_stops_work_once_and_usage_reports_the_cost(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(tmp_path / "s.json", [_reply("one"), _reply("two"), _reply("three")])
    env = {
        "NIGHTOWL_PRICES": json.dumps(PRICES),
        "NIGHTOWL_CONVERSATION_BUDGET_USD": "2",
        # The memory pass's calls count too (tests/memory/test_memory_pass.py); here only the
        # turns' own calls are priced and counted.
        "NIGHTOWL_MEMORY_PASS": "off",
    }
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            expected: list[str] = []
            for n, answer in enumerate(["one", "two", "three"]):
                client.post(path, json={"client_id": f"m{n}", "text": f"question {n}"})
                expected.append(answer)
                wait_for(lambda: _bodies(client, conversation) == expected)
            # $2.70 spent: the next turn stops before calling the model, and says so once.
            client.post(path, json={"client_id": "m3", "text": "question 3"})
            wait_for(lambda: len(_bodies(client, conversation)) == 4)
            client.post(path, json={"client_id": "m4", "text": "question 4"})
            wait_for(
                lambda: (
                    rows(
                        database_url,
                        "SELECT count(*) FROM turns WHERE conversation_id = :c AND status = 'done'",
                        c=conversation,
                    )
                    == [(5,)]
                )
            )
            replies = _bodies(client, conversation)
            usage = client.get("/v1/usage", params={"days": 1}).json()
            bad = client.get("/v1/usage", params={"days": 0})
        assert replies[:3] == ["one", "two", "three"] and len(replies) == 4
        assert BUDGET_MESSAGE in replies[3] and "$2.70" in replies[3]
        calls = rows(
            database_url,
            "SELECT cost_usd FROM model_calls WHERE conversation_id = :c",
            c=conversation,
        )
        assert sorted(round(c, 6) for (c,) in calls) == [0.9, 0.9, 0.9]

        total = usage["total"]
        assert total["calls"] == 3 and total["cost_usd"] == pytest.approx(2.7)
        assert total["input_tokens"] == 240 and total["cache_read_tokens"] == 60
        assert total["output_tokens"] == 30 and total["cached_share"] == pytest.approx(0.2)
        assert usage["by_conversation"][0]["conversation_id"] == conversation
        assert bad.status_code == 422 and "days" in bad.text

        command = [sys.executable, "-m", "nightowl.cli", "usage", "--days", "1", "--json"]
        environment = {**os.environ, **server.env}
        printed = subprocess.run(command, env=environment, capture_output=True, text=True)
        assert printed.returncode == 0, printed.stderr
        assert json.loads(printed.stdout)["total"]["cost_usd"] == pytest.approx(2.7)
        text = subprocess.run(command[:-1], env=environment, capture_output=True, text=True)
        assert "3 model calls, $2.7000" in text.stdout and "20% from cache" in text.stdout
        refused = subprocess.run(
            [*command[:4], "--days", "0"], env=environment, capture_output=True, text=True
        )
        assert refused.returncode == 2 and "give 1 to 366 days" in refused.stderr
    finally:
        server.stop()
