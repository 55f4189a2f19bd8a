"""A turn that asks waits durably for the answer: across a SIGKILL, exactly once, or until it
gives up; on SQLite and PostgreSQL, against the real server process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.store.database import Database
from nightowl.store.questions import answer_question
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

ASK = say(
    "Pay the £120 invoice from Acme?",
    buttons=[{"label": "Pay", "value": "pay"}, {"label": "Not now", "value": "no"}],
    ask="approval",
)


def _messages(client: httpx.Client, conversation: str) -> list[dict[str, Any]]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return list(page["messages"])


def _question(client: httpx.Client, conversation: str) -> dict[str, Any] | None:
    return next((m for m in _messages(client, conversation) if m["controls"]), None)


def _open_question(client: httpx.Client, conversation: str) -> dict[str, Any]:
    question: dict[str, Any] = wait_for(
        lambda: (q := _question(client, conversation)) and q["controls"]["state"] == "open" and q
    )
    return question


def _start(tmp_path: Path, database_url: str, replies: list[dict[str, Any]], **env: str) -> Any:
    model = write_script(tmp_path / "script.json", replies)
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    client = server.client()
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    client.post(
        f"/v1/conversations/{conversation}/messages",
        json={"client_id": "ask", "text": "deal with the Acme invoice"},
    )
    return server, client, conversation


def test_the_wait_outlives_a_sigkill_and_the_answer_resumes_the_turn_once(
    tmp_path: Path, database_url: str
) -> None:
    server, client, conversation = _start(
        tmp_path, database_url, [ASK, say("Paid Acme.", final=True)]
    )
    try:
        question = _open_question(client, conversation)
        server.kill()
        server.start()
        client.close()
        client = server.client()
        assert _open_question(client, conversation)["id"] == question["id"]
        activity = client.get(f"/v1/conversations/{conversation}").json()["activity"]
        assert activity == "waiting for your approval"

        path = f"/v1/conversations/{conversation}/messages/{question['id']}/answer"
        first = client.post(path, json={"client_id": "tap-1", "value": "pay"})
        assert first.status_code == 201, first.text
        assert first.json()["answer"] == {"value": "pay", "label": "Pay"}
        retried = client.post(path, json={"client_id": "tap-1", "value": "pay"})
        assert (retried.status_code, retried.json()["id"]) == (200, first.json()["id"])
        other = client.post(path, json={"client_id": "tap-2", "value": "no"})
        assert other.status_code == 409

        wait_for(lambda: any(m["body"] == "Paid Acme." for m in _messages(client, conversation)))
        bodies = [m["body"] for m in _messages(client, conversation)]
        assert bodies == ["deal with the Acme invoice", question["body"], "Pay", "Paid Acme."]
        wait_for(lambda: rows(database_url, "SELECT status FROM turns") == [("done",)])
        assert _question(client, conversation)["controls"]["state"] == "answered"  # type: ignore[index]
    finally:
        client.close()
        server.stop()


def test_an_answer_stored_just_before_a_crash_still_wakes_the_turn(
    tmp_path: Path, database_url: str
) -> None:
    server, client, conversation = _start(
        tmp_path, database_url, [ASK, say("Paid Acme.", final=True)]
    )
    try:
        question = _open_question(client, conversation)
        owner = client.get("/v1/me").json()["id"]
        server.kill()
        # The server died after committing the answer and before it woke the turn.
        database = Database(database_url)
        with database.write() as session:
            answer_question(
                session,
                conversation,
                question["id"],
                answer={"value": "pay"},
                client_id="tap",
                author_id=owner,
            )
        database.dispose()
        server.start()
        client.close()
        client = server.client()
        wait_for(lambda: any(m["body"] == "Paid Acme." for m in _messages(client, conversation)))
    finally:
        client.close()
        server.stop()


def test_an_unanswered_question_closes_and_the_agent_is_told_in_words(
    tmp_path: Path, database_url: str
) -> None:
    server, client, conversation = _start(
        tmp_path,
        database_url,
        [ASK, say("No answer, so I did not pay.", final=True)],
        NIGHTOWL_ANSWER_WAIT_S="1",
    )
    try:
        question = wait_for(lambda: _question(client, conversation))
        wait_for(
            lambda: any(m["body"].startswith("No answer") for m in _messages(client, conversation))
        )
        assert _question(client, conversation)["controls"]["state"] == "closed"  # type: ignore[index]
        late = client.post(
            f"/v1/conversations/{conversation}/messages/{question['id']}/answer",
            json={"client_id": "late", "value": "pay"},
        )
        assert late.status_code == 409
        assert "closed" in late.json()["error"]["message"]
        results = [p for (p,) in rows(database_url, "SELECT payload FROM transcript_entries")]
        assert any("No answer after 1 seconds; the question is closed" in str(r) for r in results)
    finally:
        client.close()
        server.stop()


def test_bad_answers_are_refused_with_what_the_question_takes(
    tmp_path: Path, database_url: str
) -> None:
    server, client, conversation = _start(tmp_path, database_url, [ASK, say("ok", final=True)])
    try:
        question = _open_question(client, conversation)
        path = f"/v1/conversations/{conversation}/messages/{question['id']}/answer"
        wrong = client.post(path, json={"client_id": "x", "value": "maybe"})
        assert wrong.status_code == 422
        assert "'pay', 'no'" in wrong.json()["error"]["message"]
        draftish = client.post(path, json={"client_id": "y", "action": "send"})
        assert draftish.status_code == 422
        plain = client.post(
            f"/v1/conversations/{conversation}/messages/{_messages(client, conversation)[0]['id']}"
            "/answer",
            json={"client_id": "z", "value": "pay"},
        )
        assert plain.status_code == 422
        assert "asks nothing" in plain.json()["error"]["message"]
        missing = client.post(
            f"/v1/conversations/{conversation}/messages/nope/answer",
            json={"client_id": "w", "value": "pay"},
        )
        assert missing.status_code == 404
        assert _question(client, conversation)["controls"]["state"] == "open"  # type: ignore[index]
        assert len(_messages(client, conversation)) == 2  # nothing half-written
    finally:
        client.close()
        server.stop()


def test_a_new_message_from_the_owner_closes_an_open_question(
    tmp_path: Path, database_url: str
) -> None:
    server, client, conversation = _start(
        tmp_path, database_url, [ASK, say("Left it alone.", final=True)]
    )
    try:
        question = _open_question(client, conversation)
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "nvm", "text": "never mind, I paid it myself"},
        )
        wait_for(
            lambda: any(m["body"] == "Left it alone." for m in _messages(client, conversation))
        )
        assert _question(client, conversation)["controls"]["state"] == "closed"  # type: ignore[index]
        late = client.post(
            f"/v1/conversations/{conversation}/messages/{question['id']}/answer",
            json={"client_id": "late", "value": "pay"},
        )
        assert late.status_code == 409
        wait_for(
            lambda: (
                rows(database_url, "SELECT status FROM turns ORDER BY created_at")
                == [("interrupted",), ("done",)]
            )
        )
    finally:
        client.close()
        server.stop()
