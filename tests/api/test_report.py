"""The autonomy report against a real server (SQLite and PostgreSQL): the owner's message
wakes a turn that writes a note without asking and proposes a routine the review holds; the
owner approves it; a webhook delivery wakes another turn. `GET /v1/report` and
`nightowl report --json` count the actions, the answer's time and the tokens by source, and
agree with the server's own model_calls rows."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.e2e.store_view import memory_passes_done, rows
from tests.safety.helpers import deliver, do, hook, start, turn_done, wait_kinds
from tests.server import NIGHTOWL, wait_for

pytestmark = pytest.mark.slow

ROUTINE = {"name": "news", "prompt": "summarise the news", "cron": "0 8 * * *"}
NOTE = {"text": "the owner wants the news each morning", "expires_in_minutes": 60}


def test_the_report_counts_actions_answers_and_spending_by_source(
    tmp_path: Path, database_url: str
) -> None:
    server = start(
        tmp_path,
        database_url,
        # A model that does what the newest messages' `DO:` lines say (nothing when none do).
        [{"obey": True}],
        then="repeat_last",
        review={
            "create_routine": "BLOCK: the owner did not ask for a schedule",
            "*": "ALLOW: a note for the task",
        },
        NIGHTOWL_APPROVAL_TIMEOUT_S="60",
    )
    try:
        client = server.client()
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={
                "client_id": "m1",
                "text": "keep me up to date on the news\n"
                + do("write_note", **NOTE)
                + "\n"
                + do("create_routine", **ROUTINE),
            },
        )
        pending = wait_for(lambda: client.get("/v1/approvals").json())
        approved = client.post(
            f"/v1/approvals/{pending[0]['id']}", json={"client_id": "a1", "decision": "approve"}
        )
        assert approved.status_code == 201, approved.text
        wait_kinds(client, conversation, "approved")
        wait_for(lambda: turn_done(client, conversation))
        billing = hook(client, "billing")
        deliver(server, billing, "Invoice 42 was paid.", "d1")
        wait_for(
            lambda: (
                rows(
                    database_url,
                    "SELECT count(*) FROM turns WHERE conversation_id = "
                    f"'{billing['conversation_id']}' AND status = 'done'",
                )
                == [(1,)]
            ),
            timeout=60,
        )
        # The turns' memory passes run after them: read once they are over too.
        wait_for(lambda: memory_passes_done(database_url), timeout=60)

        body = client.get("/v1/report", params={"days": 3}).json()
        today = datetime.now(UTC).date()
        assert len(body["days"]) == 3 and body["days"][-1]["day"] == today.isoformat()
        total = body["total"]
        assert total["actions"] == {
            "without_asking": 1,  # write_note, reviewed and allowed
            "held": 1,  # create_routine
            "approved": 1,
            "denied": 0,
            "expired": 0,
        }
        assert total["answers"] == 1 and 0 <= total["median_answer_s"] < 60
        assert body["days"][-1]["actions"] == total["actions"]  # it all happened today

        # Tokens by source, against the server's own records.
        by_turn = dict(
            rows(
                database_url,
                "SELECT t.conversation_id, sum(m.input_tokens + m.cache_read_tokens "
                "+ m.cache_write_tokens + m.output_tokens) FROM model_calls m "
                "JOIN turns t ON t.id = m.turn_id WHERE m.step <> -2 "
                "GROUP BY t.conversation_id",
            )
        )
        (everything,) = rows(
            database_url,
            "SELECT sum(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens) "
            "FROM model_calls",
        )[0]
        sources = total["by_source"]
        assert sources["direct"]["tokens"] == by_turn[conversation] > 0
        assert sources["webhooks"]["tokens"] == by_turn[billing["conversation_id"]] > 0
        assert total["tokens"] == everything
        assert sum(s["tokens"] for s in sources.values()) == everything
        assert sources["routines"]["tokens"] == sources["channels"]["tokens"] == 0
        (priced, unpriced) = rows(
            database_url,
            "SELECT coalesce(sum(cost_usd), 0), count(*) - count(cost_usd) FROM model_calls",
        )[0]
        assert total["cost_usd"] == round(float(priced), 6)
        assert sum(s["unpriced_calls"] for s in sources.values()) == unpriced

        printed = subprocess.run(
            [NIGHTOWL, "report", "--days", "3", "--json"],
            env=server.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(printed) == body
        table = subprocess.run(
            [NIGHTOWL, "report", "--days", "3"],
            env=server.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "without asking" in table and "webhooks" in table and "direct" in table

        for bad in ("0", "367", "seven"):
            refused = client.get("/v1/report", params={"days": bad})
            assert refused.status_code == 422, refused.text
            assert "days" in refused.text
        wrong = subprocess.run(
            [NIGHTOWL, "report", "--days", "0"], env=server.env, capture_output=True, text=True
        )
        assert wrong.returncode == 2 and "give 1 to 366 days" in wrong.stderr
        # Nobody else's report: a member sees only their own (nothing).
        with server.client(server.member_token("bob")) as bob:
            theirs = bob.get("/v1/report").json()["total"]
            assert theirs["tokens"] == 0 and theirs["actions"]["held"] == 0
        assert httpx.get(f"{server.url}/v1/report").status_code == 401
    finally:
        server.stop()
