"""The embedded local model answers a real turn end to end (it calls send_to_user)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.harness.compaction import summary_request
from nightowl.harness.pins import pin_now, pinned_request
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.messages import Entry, ToolCall
from nightowl.models.local import LocalModel
from nightowl.models.weights import weights_path
from nightowl.tools.builtin import builtin_registry
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for

# The real model takes both cores: its tests run one after another on one worker, and a loaded
# machine may take several minutes per test.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("local-model"), pytest.mark.timeout(900)]


def _ask(client: httpx.Client, url: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """A new conversation with one owner message, once its turn is done: its id, its messages."""
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    path = f"/v1/conversations/{conversation}/messages"
    client.post(path, json={"client_id": "q", "text": text})
    wait_for(
        lambda: (
            rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
            == [("done",)]
        ),
        timeout=600,
        interval=1,
    )
    return conversation, list(client.get(path).json()["messages"])


def test_local_model_answers_through_send_to_user(tmp_path: Path) -> None:
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    server = ServerProcess(tmp_path / "data", model="local").start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            conversation, messages = _ask(client, url, "What is the capital of France? Tell me.")
        replies = [m["body"] for m in messages if m["role"] == "agent"]
        assert replies, f"the local model sent nothing; transcript: {messages}"
        assert "paris" in " ".join(replies).lower()
        usage = rows(
            url,
            "SELECT model, input_tokens, cache_read_tokens, output_tokens FROM model_calls"
            " WHERE conversation_id = :c ORDER BY started_at",
            c=conversation,
        )
        model, fresh, cached, written = usage[0]
        assert model.startswith("local:") and fresh + cached > 500 and written > 0
        if len(usage) > 1:  # a follow-up call re-reads nothing it already evaluated
            assert usage[1][2] > 500
        # A new conversation starts from the saved state of the pinned prefix: only its own
        # message is evaluated (the context held the first conversation's end before).
        with server.client() as client:
            other, messages = _ask(client, url, "What is the capital of Italy? Tell me.")
        assert "rome" in " ".join(m["body"] for m in messages if m["role"] == "agent").lower()
        [(fresh, cached)] = rows(
            url,
            "SELECT input_tokens, cache_read_tokens FROM model_calls"
            " WHERE conversation_id = :c ORDER BY started_at LIMIT 1",
            c=other,
        )
        assert cached > 500 and fresh < 200, (fresh, cached)
    finally:
        server.stop()


def test_local_model_uses_its_computer(tmp_path: Path) -> None:
    """The real local model runs a shell command in its sandbox and reports what it printed."""
    token = secrets.token_hex(4)
    server = ServerProcess(
        tmp_path / "data", model="local", env={"NIGHTOWL_SANDBOX_NETWORK": "none"}
    ).start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            owner = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / owner
            home.mkdir(parents=True)
            (home / "token.txt").write_text(f"{token}\n")
            conversation, messages = _ask(
                client,
                url,
                "Use the shell tool to run `cat token.txt` on your computer, "
                "then send me exactly what it printed.",
            )
        ran = rows(
            url,
            "SELECT tool FROM tool_runs WHERE conversation_id = :c AND tool = 'shell'",
            c=conversation,
        )
        assert ran, "the local model never called the shell"
        replies = " ".join(m["body"] for m in messages if m["role"] == "agent")
        assert token in replies, f"the reply does not carry the file's content: {replies!r}"
    finally:
        server.stop()


def test_local_model_writes_a_compaction_summary_from_its_cached_prefix() -> None:
    """The summary request repeats the conversation's last request; the local model re-reads
    none of that prefix and answers in plain text (no tool call)."""
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    registry = builtin_registry()
    specs, summaries = registry.specs(), registry.summaries()
    pin = pin_now(SYSTEM_PROMPT, summaries, specs)
    call = ToolCall("c0", "send_to_user", {"text": "Noted: your flight to Lisbon is on March 3."})
    history = [
        Entry(
            kind="user", text="My flight to Lisbon is on March 3. Remind me to pack the day before."
        ),
        Entry(kind="assistant", tool_calls=(call,)),
        Entry(kind="tool_result", text="Delivered.", call_id="c0", tool_name="send_to_user"),
    ]
    model = LocalModel(threads=1)  # one thread beside other test processes (tests/conftest.py)
    turn = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, history, "Current time: 9:00.")
    asyncio.run(model.complete(replace(turn, max_output_tokens=4)))
    request = summary_request(pin, SYSTEM_PROMPT, summaries, specs, history)
    reply = asyncio.run(model.complete(replace(request, max_output_tokens=80)))
    assert reply.tool_calls == () and reply.text.strip()
    assert "lisbon" in reply.text.lower() or "march" in reply.text.lower(), reply.text
    # Everything before the summary instruction came from the KV cache.
    assert reply.usage.cache_read_tokens > 1000
    assert reply.usage.input_tokens < reply.usage.cache_read_tokens // 4


def test_local_model_runs_in_its_own_process_and_keeps_its_kv_cache() -> None:
    """Two calls of one conversation: answered by a child process (not this one), and the
    second re-reads from the KV cache all it shares with the first."""
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    registry = builtin_registry()
    specs, summaries = registry.specs(), registry.summaries()
    pin = pin_now(SYSTEM_PROMPT, summaries, specs)
    ask = Entry(kind="user", text="What is 2 + 2? Tell me.")
    call = ToolCall("c0", "send_to_user", {"text": "2 + 2 = 4."})
    history = [
        ask,
        Entry(kind="assistant", tool_calls=(call,)),
        Entry(kind="tool_result", text="Delivered.", call_id="c0", tool_name="send_to_user"),
    ]
    first = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, [ask], "Current time: 9:00.")
    second = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, history, "Current time: 9:01.")
    model = LocalModel(threads=1)  # one thread beside other test processes (tests/conftest.py)

    async def conversation() -> tuple[int | None, int | None, Any, Any]:
        one = await model.complete(replace(first, max_output_tokens=64))
        pid = model.process.pid
        two = await model.complete(replace(second, max_output_tokens=8))
        return pid, model.process.pid, one, two

    try:
        pid, same, one, two = asyncio.run(conversation())
    finally:
        model.close()
    assert pid is not None and pid != os.getpid() and same == pid
    assert [c.name for c in one.tool_calls] == ["send_to_user"]  # a whole call, held to its grammar
    prompt = two.usage.cache_read_tokens + two.usage.input_tokens
    reused = two.usage.cache_read_tokens / prompt
    print(f"KV reuse on the second call: {reused:.1%} of {prompt} tokens")
    assert reused > 0.9, two.usage


def test_a_helper_on_the_local_model_does_its_task_and_reports_to_its_parent(
    tmp_path: Path,
) -> None:
    """Delegation on the real model: the main agent (scripted, for a fixed start) hands a task
    to a helper that runs on the local model (NIGHTOWL_HELPER_MODEL=local); the helper uses its
    computer and its report, carrying what it found, reaches the parent conversation."""
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    token = secrets.token_hex(4)
    task = "Run `cat token.txt` with the shell tool, then report exactly what it printed."
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "replies": [
                    {
                        "tool_calls": [
                            {"name": "start_helper", "arguments": {"task": task}},
                            {
                                "name": "send_to_user",
                                "arguments": {"text": "On it.", "final": True},
                            },
                        ]
                    },
                    {
                        "tool_calls": [
                            {"name": "send_to_user", "arguments": {"text": "Done.", "final": True}}
                        ]
                    },
                ],
                "then": "silent",
            }
        )
    )
    server = ServerProcess(
        tmp_path / "data",
        model=f"scripted:{script}",
        env={"NIGHTOWL_HELPER_MODEL": "local", "NIGHTOWL_SANDBOX_NETWORK": "none"},
    ).start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            owner = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / owner
            home.mkdir(parents=True)
            (home / "token.txt").write_text(f"{token}\n")
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m1", "text": "Please find out what token.txt says."},
            )
            helper_sql = (
                "SELECT status, conversation_id, report FROM helpers"
                " WHERE parent_conversation_id = :c"
            )
            wait_for(
                lambda: [r[0] for r in rows(url, helper_sql, c=conversation)] == ["done"],
                timeout=600,
                interval=1,
            )
        ((_, helper_conversation, report),) = rows(url, helper_sql, c=conversation)
        ran = rows(
            url,
            "SELECT tool FROM tool_runs WHERE conversation_id = :c AND tool = 'shell'",
            c=helper_conversation,
        )
        assert ran, "the helper never used its computer"
        seen = rows(
            url,
            "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
            c=helper_conversation,
        )
        assert token in report, (
            f"the report does not carry what the helper found ({token}): {report!r}; "
            f"the helper's transcript: {[payload for (payload,) in seen]}"
        )
        models = rows(
            url,
            # (steps below 0 are the safety reviewer's, which runs on the review model)
            "SELECT DISTINCT model FROM model_calls WHERE conversation_id = :c AND step >= 0",
            c=helper_conversation,
        )
        assert [m for (m,) in models] and all(m.startswith("local:") for (m,) in models)

        # The report reaches the parent conversation as a notice (the main agent reads it; the
        # helper is marked done first, then its report wakes the parent).
        def parent_read_it() -> bool:
            parent = rows(
                url,
                "SELECT payload FROM transcript_entries WHERE conversation_id = :c",
                c=conversation,
            )
            return any(token in str(payload) for (payload,) in parent)

        wait_for(parent_read_it, timeout=120, interval=0.5)
    finally:
        server.stop()


def test_the_first_screens_example_requests_get_answers_on_the_local_model(
    tmp_path: Path,
) -> None:
    """The welcome screen offers requests that work on the default model: each gets a reply of
    its own (not one sentence for all), on the real local model."""
    server = ServerProcess(tmp_path / "data", model="local").start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            examples = client.get("/v1/status").json()["examples"]
            assert len(examples) == 3
            replies = []
            for text in examples:
                _, messages = _ask(client, url, text)
                said = " ".join(m["body"] for m in messages if m["role"] == "agent").strip()
                assert len(said) > 20, f"{text!r} got {said!r}"
                assert "could not answer" not in said, f"{text!r} got {said!r}"
                replies.append(said)
        assert len(set(replies)) == 3, replies
        assert "owl" in replies[1].lower(), replies[1]
        assert "worker" in replies[2].lower() or "cache" in replies[2].lower(), replies[2]
    finally:
        server.stop()
