"""The router under load and in parallel: exact dedupe, parallel conversations, notify policy."""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.channels.webhooks import sign
from tests.e2e.store_view import rows
from tests.server import TLS, ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow


def _deliver(url: str, hook: dict[str, str], event: int) -> int:
    body = json.dumps({"event": event}).encode()
    stamp = str(int(time.time()))
    deadline = time.monotonic() + 120  # a loaded machine may take a while to restart
    while time.monotonic() < deadline:  # retried across the restart until acknowledged
        try:
            return httpx.post(
                f"{url}{hook['url_path']}",
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "X-Nightowl-Timestamp": stamp,
                    "X-Nightowl-Signature": sign(hook["secret"], stamp, body),
                    "X-Nightowl-Delivery": f"evt-{event}",
                },
                timeout=30,
                verify=TLS,
            ).status_code
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the server never came back")


def test_a_storm_of_1000_deliveries_of_100_events_stores_exactly_100(
    tmp_path: Path, database_url: str
) -> None:
    server = ServerProcess(tmp_path / "data", database_url).start()
    try:
        with server.client() as client:
            hook = client.post("/v1/hooks", json={"name": "storm"}).json()
        deliveries = [event for event in range(100) for _ in range(10)]
        random.Random(7).shuffle(deliveries)
        restarted = threading.Event()

        def restart_midway() -> None:
            time.sleep(1.0)
            server.kill()
            server.start()
            restarted.set()

        restarter = threading.Thread(target=restart_midway)
        restarter.start()
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(pool.map(lambda e: _deliver(server.url, hook, e), deliveries))
        restarter.join()
        assert restarted.is_set()
        assert set(statuses) == {202}
        stored = rows(
            database_url,
            "SELECT body FROM messages WHERE conversation_id = :c",
            c=hook["conversation_id"],
        )
        assert len(stored) == 100
        assert {json.loads(body)["event"] for (body,) in stored} == set(range(100))
    finally:
        server.stop()


def test_two_conversations_progress_in_parallel_while_one_is_busy(
    tmp_path: Path, database_url: str
) -> None:
    # Every model call takes 3 s: the busy conversation's turns run for many seconds, so a
    # router that served conversations one after another would start the idle one's turn
    # only after the busy one's last turn ended (an order, not a time: a loaded machine
    # slows both alike).
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "delay": 3,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "ok", "final": True}}
                ],
            }
        ],
        then="repeat_last",
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            busy = client.post("/v1/conversations", json={}).json()["id"]
            free = client.post("/v1/conversations", json={}).json()["id"]
            # Keep `busy` occupied: a burst of messages, each answered by a turn.
            for n in range(5):
                client.post(
                    f"/v1/conversations/{busy}/messages", json={"client_id": f"b{n}", "text": "x"}
                )
            ((running,),) = wait_for(
                lambda: rows(
                    database_url,
                    "SELECT id FROM turns WHERE conversation_id = :c AND status = 'running'",
                    c=busy,
                ),
                timeout=60,
                interval=0.01,
            )
            client.post(f"/v1/conversations/{free}/messages", json={"client_id": "f", "text": "hi"})
            turns_sql = (
                "SELECT status, started_at, finished_at FROM turns WHERE conversation_id = :c"
            )
            wait_for(
                lambda: [row[0] for row in rows(database_url, turns_sql, c=free)] == ["done"],
                timeout=120,
                interval=0.05,
            )
            wait_for(
                lambda: all(
                    row[0] not in ("queued", "running")
                    for row in rows(database_url, turns_sql, c=busy)
                ),
                timeout=120,
            )
        ((_, free_started, _),) = rows(database_url, turns_sql, c=free)
        ((busy_ended,),) = rows(
            database_url, "SELECT finished_at FROM turns WHERE id = :t", t=running
        )
        # Both ran at once: the idle conversation's turn started while the busy turn that was
        # running when its message came had not ended.
        assert free_started < busy_ended, (
            f"the idle conversation's turn started at {free_started}, "
            f"after the busy turn running then ended at {busy_ended}"
        )
    finally:
        server.stop()


def _events(server: ServerProcess, stop: threading.Event, seen: list[dict[str, Any]]) -> None:
    try:
        with server.client() as client, client.stream("GET", "/v1/events", timeout=30) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                if stop.is_set():
                    return
    except httpx.TransportError:
        return  # the server stopped at the end of the test


def test_only_important_background_messages_raise_a_notification(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "FYI"}}]},
            {
                "tool_calls": [
                    {
                        "name": "send_to_user",
                        "arguments": {"text": "Urgent!", "important": True, "final": True},
                    }
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", model=model).start()
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    listener = threading.Thread(target=_events, args=(server, stop, seen), daemon=True)
    listener.start()
    try:
        with server.client() as client:
            hook = client.post("/v1/hooks", json={"name": "alerts"}).json()
        time.sleep(0.5)
        assert _deliver(server.url, hook, 1) == 202

        def kinds() -> list[str]:
            # Activity changes (the turn's status) come too; only messages matter here.
            return [
                e["kind"]
                for e in seen
                if e["conversation_id"] == hook["conversation_id"] and e["kind"] != "activity"
            ]

        wait_for(lambda: len(kinds()) >= 3, timeout=30)
        assert kinds() == ["message", "message", "notify"]  # payload, FYI, Urgent!
        assert any(e["kind"] == "activity" for e in seen)
    finally:
        stop.set()
        server.stop()


def test_three_rapid_group_messages_are_answered_by_one_turn(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "tool_calls": [
                    {
                        "name": "send_to_user",
                        "arguments": {"text": "Added Dana and Lee", "final": True},
                    }
                ]
            }
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            group = client.post("/v1/conversations", json={"kind": "group"}).json()["id"]
            for n, text in enumerate(["add Dana to Thursday's meeting", "and Lee", "thanks!"]):
                client.post(
                    f"/v1/conversations/{group}/messages", json={"client_id": f"g{n}", "text": text}
                )
            wait_for(
                lambda: (
                    rows(
                        database_url, "SELECT status FROM turns WHERE conversation_id = :c", c=group
                    )
                    == [("done",)]
                ),
                timeout=30,
            )
            bodies = [
                m["body"]
                for m in client.get(f"/v1/conversations/{group}/messages").json()["messages"]
            ]
        assert bodies[-1] == "Added Dana and Lee" and len(bodies) == 4
        batch = rows(
            database_url,
            "SELECT batch_first_seq, batch_last_seq FROM turns WHERE conversation_id = :c",
            c=group,
        )
        assert batch == [(1, 3)]
    finally:
        server.stop()
