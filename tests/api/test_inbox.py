"""GET /v1/inbox and `nightowl inbox` against a real server with a scripted model, on SQLite
and PostgreSQL: three conversations wait on the owner; answering anywhere takes items out."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.databases import BACKENDS, fresh_database
from tests.safety.helpers import do
from tests.server import NIGHTOWL, ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

# Each conversation's first call asks what its message says (`DO: …`); its second, after the
# answer, reports the action done.
SCRIPT = [{"obey": True}, say("Booked: 9:00 to Leeds.", final=True)]
APPROVAL = do(
    "send_to_user",
    text="May I book the 9:00 train to Leeds?",
    buttons=[{"label": "Approve", "value": "yes"}, {"label": "Deny", "value": "no"}],
    ask="approval",
)
DRAFT = do("send_to_user", text="Here is a reply to Sam:", draft="Hi Sam, Tuesday works.")
QUESTION = do("send_to_user", text="Tea or coffee?", buttons=[{"label": "Tea", "value": "tea"}])


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    with fresh_database(request.param, tmp_path) as url:
        model = write_script(tmp_path / "script.json", SCRIPT)
        process = ServerProcess(tmp_path / "data", url, model=model).start()
        try:
            yield process
        finally:
            process.stop()


def _start(client: httpx.Client, title: str, text: str) -> str:
    made = client.post("/v1/conversations", json={"title": title})
    assert made.status_code == 201, made.text
    conversation = str(made.json()["id"])
    sent = client.post(
        f"/v1/conversations/{conversation}/messages", json={"client_id": "c1", "text": text}
    )
    assert sent.status_code == 201, sent.text
    return conversation


def _inbox(client: httpx.Client, **query: Any) -> dict[str, Any]:
    answer = client.get("/v1/inbox", params=query)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NIGHTOWL, "inbox", "--url", server.url, *args],
        env=server.env,
        capture_output=True,
        text=True,
    )


def test_the_inbox_lists_what_waits_and_answers_anywhere_take_items_out(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        trip = _start(client, "Trip", APPROVAL)
        wait_for(lambda: _inbox(client)["total"] == 1)
        mail = _start(client, "Mail", DRAFT)
        wait_for(lambda: _inbox(client)["total"] == 2)
        drinks = _start(client, "Drinks", QUESTION)
        wait_for(lambda: _inbox(client)["total"] == 3)

        inbox = _inbox(client)
        kinds = {item["kind"]: item for item in inbox["items"]}
        assert set(kinds) == {"approval", "draft", "question"}
        assert inbox["counts"]["approval"] == 1 and inbox["counts"]["helper_report"] == 0
        approval = kinds["approval"]
        assert approval["conversation_id"] == trip and approval["conversation_title"] == "Trip"
        assert approval["link"] == f"/#c={trip}&m={approval['id']}"
        assert approval["message"]["controls"]["state"] == "open"
        assert kinds["draft"]["message"]["controls"]["draft"] == "Hi Sam, Tuesday works."
        # Newest first when nothing has a deadline.
        assert [i["conversation_id"] for i in inbox["items"]] == [drinks, mail, trip]
        assert [i["kind"] for i in _inbox(client, kind="draft")["items"]] == ["draft"]
        both = _inbox(client, kind=["draft", "question"])
        assert {i["kind"] for i in both["items"]} == {"draft", "question"}
        assert [i["id"] for i in _inbox(client, conversation_id=trip)["items"]] == [approval["id"]]

        # A member sees only their own items, and no one else's conversation.
        member = server.member_token("sam")
        with server.client(member) as theirs:
            assert _inbox(theirs)["items"] == []
            assert theirs.get("/v1/inbox", params={"conversation_id": trip}).status_code == 404

        # The CLI lists the same items and answers one with the conversation's own call.
        listed = _cli(server)
        assert listed.returncode == 0, listed.stderr
        assert approval["id"] in listed.stdout and "approval" in listed.stdout
        answered = _cli(server, "answer", approval["id"], "approve")
        assert answered.returncode == 0, answered.stderr
        assert "Approve" in answered.stdout
        wait_for(lambda: approval["id"] not in {i["id"] for i in _inbox(client)["items"]})

        # The turn resumed once: the action ran and said so.
        def replies() -> list[str]:
            page = client.get(f"/v1/conversations/{trip}/messages").json()
            return [m["body"] for m in page["messages"] if m["role"] == "agent"]

        wait_for(lambda: "Booked: 9:00 to Leeds." in replies())
        assert replies().count("Booked: 9:00 to Leeds.") == 1
        again = _cli(server, "answer", approval["id"], "deny")
        assert again.returncode == 2 and "no item" in again.stdout

        # Answered in the conversation (another device): gone from the inbox.
        draft = kinds["draft"]
        sent = client.post(
            f"/v1/conversations/{mail}/messages/{draft['id']}/answer",
            json={"client_id": "phone-1", "action": "send"},
        )
        assert sent.status_code == 201, sent.text
        assert [i["kind"] for i in _inbox(client)["items"]] == ["question"]
        bad = client.get("/v1/inbox", params={"kind": "everything"})
        assert bad.status_code == 422
