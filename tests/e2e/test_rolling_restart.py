"""A rolling restart onto the same application version: each worker in turn is stopped
(SIGTERM) and started again while ten turns and two helpers run; all finish, once each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for

pytestmark = pytest.mark.slow

TURNS = 10
HELPED = 2  # of the ten conversations, these start a helper
WAIT_S = 30  # an owner's wait: longer than a worker takes to start on a loaded machine


def _do(tool: str, **arguments: Any) -> str:
    """An owner's message the scripted model obeys: run this tool call."""
    return "DO: " + json.dumps({"name": tool, "arguments": arguments})


def _agent_bodies(url: str, conversation: str) -> list[str]:
    found = rows(
        url,
        "SELECT body FROM messages WHERE conversation_id = :c AND role = 'agent' ORDER BY seq",
        c=conversation,
    )
    return [body for (body,) in found]


def _state(url: str) -> str:
    """What the store holds, for a failure's message."""
    turns = rows(url, "SELECT id, status, error FROM turns ORDER BY id")
    flows = rows(
        url,
        "SELECT workflow_uuid, status, executor_id, recovery_attempts FROM dbos.workflow_status"
        " ORDER BY workflow_uuid",
    )
    tools = rows(
        url, "SELECT turn_id, tool, finished_at IS NOT NULL FROM tool_runs ORDER BY turn_id"
    )
    return f"turns {turns}\nworkflows {flows}\ntool runs {tools}"


def _unfinished_waits(url: str, conversations: list[str]) -> set[str]:
    """The owners' waits of these conversations that started and have not finished."""
    found = rows(
        url,
        "SELECT id FROM tool_runs WHERE tool = 'wait' AND finished_at IS NULL"
        " AND conversation_id = ANY(:cs)",
        cs=conversations,
    )
    return {run for (run,) in found}


def _send(client: Any, texts: list[str]) -> list[str]:
    """One new conversation per text; their ids."""
    conversations = []
    for text in texts:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": text},
        ).raise_for_status()
        conversations.append(conversation)
    return conversations


def test_turns_and_helpers_survive_a_rolling_restart_of_both_workers(tmp_path: Path) -> None:
    script = {
        # A turn obeys its owner (a long wait, or starting a helper), then says it is done;
        # a helper's report wakes its parent, which says so.
        "replies": [{"obey": True}, say("done", final=True), say("reported", final=True)],
        "helper": [
            *(
                {"tool_calls": [{"name": "wait", "arguments": {"seconds": 2 + n / 10}}]}
                for n in range(4)
            ),
            {"tool_calls": [{"name": "report", "arguments": {"text": "counted"}}]},
        ],
        "then": "silent",
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    model = f"scripted:{tmp_path / 'script.json'}"
    # Each worker is stopped while it runs owners' waits it alone took: the first wave is sent
    # while only worker A runs, the second while A is stopped. A wait outlasts a worker's
    # start on a loaded machine, so each stop cuts waits off.
    wait = _do("wait", seconds=WAIT_S)
    helped = [_do("start_helper", task="count the files", name=f"h{n}") for n in range(HELPED)]
    first_wave = [*helped, *[wait] * (TURNS // 2 - HELPED)]
    second_wave = [wait] * (TURNS - len(first_wave))
    with fresh_database("postgresql", tmp_path) as url:
        api = ServerProcess(
            tmp_path / "api", url, model=model, executor_id="api", env={"NIGHTOWL_ROLE": "api"}
        ).start()
        a, b = (
            ServerProcess(
                tmp_path / name, url, model=model, executor_id=name, env={"NIGHTOWL_ROLE": "worker"}
            )
            for name in ("worker-a", "worker-b")
        )
        try:
            a.start()
            with api.client() as client:
                first = _send(client, first_wave)
            owners_first = first[HELPED:]
            wait_for(lambda: len(_unfinished_waits(url, owners_first)) == len(owners_first), 120)
            b.start()
            cut_first = _unfinished_waits(url, owners_first)
            a.stop()  # SIGTERM: a clean stop, its turns left to resume
            with api.client() as client:
                second = _send(client, second_wave)  # B alone takes these
            wait_for(lambda: len(_unfinished_waits(url, second)) == len(second), 120)
            a.start()
            cut_second = _unfinished_waits(url, second)
            b.stop()
            b.start()
            conversations = first + second
            try:
                wait_for(
                    lambda: all(
                        _agent_bodies(url, c) == (["done", "reported"] if n < HELPED else ["done"])
                        for n, c in enumerate(conversations)
                    ),
                    timeout=180,
                )
            except AssertionError as late:
                raise AssertionError(_state(url)) from late
            helpers = rows(url, "SELECT status, report FROM helpers ORDER BY name")
            assert helpers == [("done", "counted")] * HELPED
            # A turn records its end a step after its last message: give it that step.
            unfinished = "SELECT status, error FROM turns WHERE status <> 'done'"
            try:
                wait_for(lambda: rows(url, unfinished) == [], timeout=30)
            except AssertionError as stuck:
                raise AssertionError(_state(url)) from stuck
            # Each owner's wait finished once (one cut off by a stop runs again, as a step
            # does: at least once; a finished one is never run again).
            owners = owners_first + second
            finished = rows(
                url,
                "SELECT conversation_id, count(*) FROM tool_runs WHERE tool = 'wait'"
                " AND finished_at IS NOT NULL AND conversation_id = ANY(:cs)"
                " GROUP BY conversation_id",
                cs=owners,
            )
            assert sorted(finished) == sorted((c, 1) for c in owners)
            # Both stops really cut in: waits running when each worker stopped never finished
            # there (they ran again, above).
            never_finished = _unfinished_waits(url, owners)
            assert cut_first & never_finished, (cut_first, never_finished)
            assert cut_second & never_finished, (cut_second, never_finished)
        finally:
            api.stop()
            a.stop()
            b.stop()
