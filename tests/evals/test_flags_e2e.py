"""Every automatic flag makes a draft eval case on a real server with a scripted model: a
guard stop, a tool error loop, a held call the owner approved (a false positive), one the
owner denied, and a correction that cuts in saying the agent misunderstood. Marking a reply
wrong over the API makes one too. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.store_view import rows
from tests.safety.helpers import do, start
from tests.server import NIGHTOWL, wait_for

pytestmark = pytest.mark.slow


def _conversation(client: httpx.Client, text: str) -> str:
    conversation = str(client.post("/v1/conversations", json={}).json()["id"])
    sent = client.post(
        f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": text}
    )
    assert sent.status_code in (200, 201), sent.text
    return conversation


def _cases(client: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = client.get("/v1/evals/cases", params={"status": "draft"})
    assert listed.status_code == 200, listed.text
    return {case["conversation_id"]: case for case in listed.json()["cases"]}


def _approval_for(client: httpx.Client, conversation: str) -> str:
    def find() -> str | None:
        for item in client.get("/v1/approvals").json():
            if item["conversation_id"] == conversation:
                return str(item["id"])
        return None

    return str(wait_for(find, timeout=60))


def test_each_failure_becomes_a_draft_case(tmp_path: Path, database_url: str) -> None:
    server = start(
        tmp_path,
        database_url,
        [{"obey": True}],
        then="repeat_last",
        review={"create_routine": "BLOCK: the owner did not ask for a schedule"},
        NIGHTOWL_APPROVAL_TIMEOUT_S="120",
    )
    routine = {"name": "news", "prompt": "summarise the news", "cron": "0 8 * * *"}
    try:
        client = server.client()
        approved = _conversation(client, do("create_routine", **routine))
        denied = _conversation(client, do("create_routine", **{**routine, "name": "spam"}))
        errors = _conversation(
            client, "\n".join(do("load_tools", query=f"no-such-tool-{n}") for n in range(3))
        )
        guard = _conversation(client, "\n".join([do("wait", seconds=0.01)] * 4))
        cut = _conversation(client, do("wait", seconds=30))
        answered = _conversation(
            client, do("send_to_user", text="The capital of Australia is Sydney.", final=True)
        )

        for conversation, decision in ((approved, "approve"), (denied, "deny")):
            question = _approval_for(client, conversation)
            answer = {"client_id": decision, "decision": decision}
            assert client.post(f"/v1/approvals/{question}", json=answer).status_code == 201
        wait_for(
            lambda: rows(
                database_url,
                "SELECT id FROM tool_runs WHERE conversation_id = :c AND tool = 'wait'",
                c=cut,
            ),
            timeout=60,
        )
        time.sleep(0.3)  # the 30 s wait is in flight (as tests/router/test_preemption.py)
        correction = client.post(
            f"/v1/conversations/{cut}/messages",
            json={"client_id": "m2", "text": "No, that's not what I asked."},
        )
        assert correction.status_code in (200, 201)

        agent = wait_for(
            lambda: [
                m
                for m in client.get(f"/v1/conversations/{answered}/messages").json()["messages"]
                if m["role"] == "agent"
            ],
            timeout=60,
        )[0]
        marked = client.post(
            f"/v1/conversations/{answered}/messages/{agent['id']}/wrong",
            json={"expected": "Canberra is the capital."},
        )
        assert marked.status_code == 201, marked.text

        wanted = {approved, denied, errors, guard, cut, answered}
        cases = wait_for(lambda: (found := _cases(client)) and wanted <= set(found) and found)
        sources = {conversation: cases[conversation]["source"] for conversation in wanted}
        assert sources == {
            approved: "approved_block",
            denied: "denied_approval",
            errors: "tool_error_loop",
            guard: "guard_stop",
            cut: "misunderstood",
            answered: "marked",
        }
        assert cases[approved]["checker"]["expect_tools"] == [
            {"name": "create_routine", "arguments": {}}
        ]
        assert cases[denied]["checker"]["forbid_tools"][0]["name"] == "create_routine"
        assert "same arguments" in cases[guard]["owner_words"]
        assert cases[cut]["owner_words"] == "No, that's not what I asked."
        assert all(case["status"] == "draft" for case in cases.values())
        # One case per failure: no flag fired twice, none fired where nothing failed.
        listed = client.get("/v1/evals/cases", params={"status": "draft"}).json()["cases"]
        assert len(listed) == 6

        # The case keeps the conversation before the failing turn's first model call.
        full = client.get(f"/v1/evals/cases/{cases[answered]['id']}").json()
        assert [e["kind"] for e in full["history"]] == ["user"]
        assert "Sydney" in full["failed_reply"]
        kept = client.patch(
            f"/v1/evals/cases/{full['id']}",
            json={"checker": {"require_text": ["canberra"]}, "status": "kept"},
        )
        assert kept.status_code == 200 and kept.json()["status"] == "kept"
        bad = client.patch(f"/v1/evals/cases/{full['id']}", json={"checker": {"nope": 1}})
        assert bad.status_code == 422 and "unknown checker fields" in bad.text

        # The CLI replays the kept case on a model that repeats the mistake: it fails.
        script = Path(server.env["NIGHTOWL_MODEL"].removeprefix("scripted:"))
        printed = subprocess.run(
            [
                NIGHTOWL,
                "evals",
                "run",
                "--case",
                full["id"],
                "--model",
                f"scripted:{script}",
                "--json",
            ],
            env=server.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        report = json.loads(printed)
        assert report["cases"] == 1 and report["passed"] == 0
    finally:
        server.stop()
