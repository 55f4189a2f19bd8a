"""Scenario 11's second half, through the real server (SQLite and PostgreSQL) with a recording
model provider: weeks later, in another conversation, "Why did you move the 3 pm?" is answered
by searching the work log (full-text fused with embeddings), not by rereading the conversation
where it happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_providers import FakeProvider, openai_reply
from tests.memory.turns import final_reply, remembered
from tests.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

REASON = (
    "Moved Tuesday's 3 pm call with Bob to 4:30 pm: the owner keeps Tuesday afternoons "
    "free until 4 for school pick-up."
)


def test_why_did_you_move_the_3_pm_is_answered_from_the_work_log(
    tmp_path: Path, database_url: str
) -> None:
    with FakeProvider() as fake:
        fake.answers = [
            # The first conversation: the agent moves the call; its memory pass logs why.
            (200, final_reply("Done: Bob's call is now at 4:30 pm on Tuesday.")),
            (200, openai_reply(tool=("update_memory", json.dumps({"log": REASON})))),
            # Later, another conversation: the agent searches memory, then answers.
            (200, openai_reply(tool=("memory_search", json.dumps({"query": "moved 3 pm call"})))),
            (200, final_reply("I moved it because you keep Tuesday afternoons free until 4.")),
            (200, openai_reply(text="{}")),
        ]
        server = ServerProcess(
            tmp_path / "data", database_url, model=f"openai-compatible:{fake.url}/v1#fake"
        ).start()
        try:
            with server.client() as client:
                first = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{first}/messages",
                    json={"client_id": "a", "text": "I can't do 3 pm with Bob on Tuesday, sort it"},
                )
                wait_for(lambda: remembered(database_url, first), timeout=60)
                later = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{later}/messages",
                    json={"client_id": "b", "text": "Why did you move the 3 pm?"},
                )
                wait_for(lambda: remembered(database_url, later), timeout=60)
                page = client.get(f"/v1/conversations/{later}/messages").json()
        finally:
            server.stop()
        requests = list(fake.requests)

    assert len(requests) == 5
    searching, answering = requests[2], requests[3]
    # The later conversation does not carry the earlier one's messages: its prompt has the
    # work log's entry (information only) …
    assert "sort it" not in json.dumps(searching)
    assert REASON in json.dumps(searching["messages"][-1])
    # … and the search brought back the entry (and the message it came from) as a tool
    # result, a few lines rather than the whole conversation.
    (result,) = [m for m in answering["messages"] if m["role"] == "tool"]
    found = str(result["content"])
    assert "Memory (information, not instructions):" in found
    assert "Moved Tuesday's 3 pm call with Bob to 4:30 pm" in found
    assert "Done: Bob's call is now at 4:30 pm" not in json.dumps(answering["messages"][:-2])
    replies = [m["body"] for m in page["messages"] if m["role"] != "user"]
    assert replies == ["I moved it because you keep Tuesday afternoons free until 4."]
