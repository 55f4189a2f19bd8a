"""Drafts for irreversible sends: the owner edits and sends; the runtime sends exactly once,
even when the server is SIGKILLed between the provider call and recording its result."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.store_view import rows
from tests.safety.helpers import audit, messages, start, wait_kinds
from tests.safety.send_provider import FakeSendProvider
from tests.server import say, wait_for

pytestmark = pytest.mark.slow

EMAIL = {"to": "dana@acme.example", "subject": "Lunch", "text": "Lunch on Thursday?"}


def _ask_for_a_draft(tmp_path: Path, database_url: str, provider: FakeSendProvider) -> tuple:  # type: ignore[type-arg]
    server = start(
        tmp_path,
        database_url,
        [
            {"tool_calls": [{"name": "send_message", "arguments": EMAIL}]},
            say("Sent your note to Dana.", final=True),
        ],
        NIGHTOWL_SEND_PROVIDER_URL=provider.url,
    )
    client = server.client()
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    client.post(
        f"/v1/conversations/{conversation}/messages",
        json={"client_id": "m1", "text": "email Dana and ask her to lunch on Thursday"},
    )
    draft = wait_for(lambda: client.get("/v1/drafts").json())[0]
    return server, client, conversation, draft


def test_a_send_is_a_draft_the_owner_edits_and_the_runtime_sends_once_across_a_sigkill(
    tmp_path: Path, database_url: str
) -> None:
    with FakeSendProvider() as provider:
        server, client, conversation, draft = _ask_for_a_draft(tmp_path, database_url, provider)
        try:
            assert draft["controls"]["draft"] == EMAIL["text"]
            assert "dana@acme.example" in draft["body"] and provider.posts == []
            provider.hold.clear()  # the provider takes the send but does not answer yet
            sent = client.post(
                f"/v1/drafts/{draft['id']}",
                json={"client_id": "send-1", "action": "send", "text": "Lunch on Friday instead?"},
            )
            assert sent.status_code == 201, sent.text
            wait_for(lambda: len(provider.posts) == 1)
            server.kill()  # between the provider call and recording its result
            provider.hold.set()
            server.start()
            client.close()
            client = server.client()
            wait_kinds(client, conversation, "sent")
            wait_for(
                lambda: any(
                    m["body"] == "Sent your note to Dana." for m in messages(client, conversation)
                )
            )
            assert len(provider.posts) == 1
            post = provider.posts[0]
            assert post["body"] == {**EMAIL, "text": "Lunch on Friday instead?"}
            assert provider.lookups == [post["key"]]  # checked before any retry
            assert rows(database_url, "SELECT status, provider_id FROM sends") == [
                ("sent", "snd-1")
            ]
            kinds = [e["kind"] for e in audit(client, conversation)]
            assert kinds == ["reviewed", "sent"]
        finally:
            client.close()
            server.stop()


def test_a_discarded_draft_sends_nothing(tmp_path: Path, database_url: str) -> None:
    with FakeSendProvider() as provider:
        server, client, conversation, draft = _ask_for_a_draft(tmp_path, database_url, provider)
        try:
            discarded = client.post(
                f"/v1/drafts/{draft['id']}", json={"client_id": "d", "action": "discard"}
            )
            assert discarded.status_code == 201
            wait_kinds(client, conversation, "discarded")
            assert provider.posts == [] and rows(database_url, "SELECT * FROM sends") == []
            again = client.post(
                f"/v1/drafts/{draft['id']}", json={"client_id": "d2", "action": "send"}
            )
            assert again.status_code == 409
        finally:
            client.close()
            server.stop()
