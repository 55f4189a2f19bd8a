"""The embedded local model answers a real turn end to end (it calls send_to_user)."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.harness.compaction import summary_request
from nightowl.harness.pins import pin_now, pinned_request
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.harness.transcript import Entry, ToolCall
from nightowl.models.local import LocalModel
from nightowl.models.weights import weights_path
from nightowl.tools.builtin import builtin_registry
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow


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
        assert usage[0][0].startswith("local:") and usage[0][1] > 500 and usage[0][3] > 0
        if len(usage) > 1:  # a follow-up call re-reads nothing it already evaluated
            assert usage[1][2] > 500
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
    model = LocalModel(threads=2)
    turn = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, history, "Current time: 9:00.")
    asyncio.run(model.complete(replace(turn, max_output_tokens=4)))
    request = summary_request(pin, SYSTEM_PROMPT, summaries, specs, history)
    reply = asyncio.run(model.complete(replace(request, max_output_tokens=80)))
    assert reply.tool_calls == () and reply.text.strip()
    assert "lisbon" in reply.text.lower() or "march" in reply.text.lower(), reply.text
    # Everything before the summary instruction came from the KV cache.
    assert reply.usage.cache_read_tokens > 1000
    assert reply.usage.input_tokens < reply.usage.cache_read_tokens // 4
