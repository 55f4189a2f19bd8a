"""The embedded local model answers a real turn end to end (it calls send_to_user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightowl.models.weights import weights_path
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow


def test_local_model_answers_through_send_to_user(tmp_path: Path) -> None:
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    server = ServerProcess(tmp_path / "data", model="local").start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "q", "text": "What is the capital of France? Tell me."},
            )
            wait_for(
                lambda: (
                    rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
                    == [("done",)]
                ),
                timeout=600,
                interval=1,
            )
            messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
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
