"""Compaction through the real server: after a turn that ends big and a quiet spell, the
history becomes a summary written with the cached prefix; the latest user-facing messages
survive word for word and the conversation carries on; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

SUMMARY = "Summary: the owner asked for tasks 0-3; all four are done. Nothing is open."


def _replies(client: Any, conversation: str) -> list[str]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m["body"] for m in page["messages"] if m["role"] == "agent"]


def _sections(value: Any) -> list[list[Any]]:
    return value if isinstance(value, list) else json.loads(value)


def test_a_quiet_big_conversation_is_compacted_and_carries_on(
    tmp_path: Path, database_url: str
) -> None:
    answers = ["one", "two", "three", "four", "five"]
    model = write_script(
        tmp_path / "s.json", [say(a, final=True) for a in answers], summary=SUMMARY
    )
    env = {
        "NIGHTOWL_COMPACT_AT_TOKENS": "1000",  # every turn here ends above it
        "NIGHTOWL_COMPACT_IDLE_S": "3",
        "NIGHTOWL_COMPACT_KEEP_MESSAGES": "6",
        "NIGHTOWL_SANDBOX_NETWORK": "none",
    }
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            # Four turns in quick succession: each plans a compaction, and each planned one
            # finds the conversation woken up since, except the last.
            for n in range(4):
                client.post(path, json={"client_id": f"m{n}", "text": f"task {n}"})
                wait_for(lambda: len(_replies(client, conversation)) == n + 1)  # noqa: B023
            found = wait_for(
                lambda: rows(
                    database_url,
                    "SELECT entry, model_call_id, tokens_before FROM compactions"
                    " WHERE conversation_id = :c",
                    c=conversation,
                ),
                timeout=40,
            )
            assert len(found) == 1
            entry = found[0][0] if isinstance(found[0][0], dict) else json.loads(found[0][0])
            assert found[0][2] >= 1000
            # The last six user-facing messages, word for word, after the summary.
            assert entry["meta"]["kept"] == [
                "owner: task 1",
                "you (send_to_user): two",
                "owner: task 2",
                "you (send_to_user): three",
                "owner: task 3",
                "you (send_to_user): four",
            ]
            assert SUMMARY in entry["text"] and "task 0" not in entry["text"]
            assert entry["meta"]["replaced_replies"] == 4

            # The conversation goes on from the summary (the scripted model's fifth reply).
            client.post(path, json={"client_id": "m4", "text": "task 4"})
            wait_for(lambda: _replies(client, conversation) == answers)
        calls = rows(
            database_url,
            "SELECT id, turn_id, sections, cache_break, cache_break_explained,"
            " meter_prompt_tokens, meter_prefix_tokens FROM model_calls"
            " WHERE conversation_id = :c AND step >= 0 ORDER BY started_at",  # no memory passes
            c=conversation,
        )
    finally:
        server.stop()
    summary_at = next(n for n, call in enumerate(calls) if call[0] == found[0][1])
    summary = calls[summary_at]
    assert summary[1].startswith("compaction:") and summary_at == 4
    # The summary request repeats the previous request but its newest note (and then goes on
    # with the turn's reply): no break, and the meter finds that prefix cached.
    before, during = _sections(calls[summary_at - 1][2]), _sections(summary[2])
    assert during[: len(before) - 1] == before[:-1] and summary[3] is None
    assert during[-1][0] == "newest" and len(during) > len(before)
    assert summary[6] > 1000 and summary[6] >= sum(s[2] for s in before[:-1]) // 4
    # The first request after it starts afresh from the summary: an explained break.
    after = calls[summary_at + 1]
    assert after[3] is not None and after[3].endswith("the conversation was compacted")
    assert after[4] is True or after[4] == 1
    assert len(_sections(after[2])) < len(during)
    assert all(call[3] is None for call in calls[1:summary_at])


def test_typing_warms_the_cache_once_per_lifetime(tmp_path: Path, database_url: str) -> None:
    model = write_script(tmp_path / "s.json", [say("hello", final=True)])
    env = {"NIGHTOWL_CACHE_LIFETIME_S": "3", "NIGHTOWL_SANDBOX_NETWORK": "none"}
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            typing = f"/v1/conversations/{conversation}/typing"
            # Nothing was ever sent: there is no prefix to warm.
            assert client.post(typing).json() == {"warming": False}
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "m0", "text": "hi"})
            wait_for(lambda: _replies(client, conversation) == ["hello"])
            # The turn's own call warmed it moments ago.
            first = client.post(typing)
            assert first.status_code == 202 and first.json() == {"warming": False}
            wait_for(lambda: client.post(typing).json()["warming"], timeout=10, interval=0.5)
            assert client.post(typing).json() == {"warming": False}  # once per lifetime
            warm = wait_for(
                lambda: rows(
                    database_url,
                    "SELECT cache_break, meter_prompt_tokens, input_tokens FROM model_calls"
                    " WHERE conversation_id = :c AND turn_id = 'warm'"
                    " AND finished_at IS NOT NULL",
                    c=conversation,
                )
            )
    finally:
        server.stop()
    assert len(warm) == 1
    cache_break, prompt, used = warm[0]
    assert cache_break is None and prompt > 500 and used > 0  # the same prefix, resent
    # The warming did not add to what the model saw: the history holds one reply.
    entries = rows(
        database_url,
        "SELECT count(*) FROM transcript_entries WHERE conversation_id = :c",
        c=conversation,
    )
    # The message, the note the call was shown, the reply with its call, the call's result.
    assert entries[0][0] == 4
