"""PostgreSQL restarted under a steady load of messages: requests and turns recover by
themselves, nothing is lost or doubled, no turn is left running.

This restarts the machine's one PostgreSQL, which every other test uses: it is marked
`pg_restart`, and `make test` runs it alone after the parallel part. It always leaves
PostgreSQL running, even when it fails.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.databases import PG_ADMIN, fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = [pytest.mark.slow, pytest.mark.pg_restart]

CLIENTS = 3
MESSAGES = 12  # per client, each sent once the reply to the one before it arrived


def _cluster(action: str) -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _postgres_answers() -> bool:
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=2) as connection:
            connection.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _started_at() -> datetime:
    with psycopg.connect(PG_ADMIN, connect_timeout=5) as connection:
        row = connection.execute("SELECT pg_postmaster_start_time()").fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def postgres_kept_up() -> Iterator[None]:
    """Whatever happens in the test, PostgreSQL runs again when it ends."""
    try:
        yield
    finally:
        if not _postgres_answers():
            _cluster("start")
        wait_for(_postgres_answers, timeout=60)


class Chatter:
    """One client connection: sends messages one after another, resends a failed one with
    the same client_id, and counts the requests it had to resend."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        self.client = server.client()
        self.name = name
        self.resent: set[str] = set()
        self.refusals: Counter[int] = Counter()
        self.sent: list[str] = []
        self.conversation = self._call("POST", "/v1/conversations", {}).json()["id"]

    def _call(self, method: str, path: str, body: object = None, key: str = "") -> httpx.Response:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = self.client.request(method, path, json=body)
                if response.status_code < 500:
                    return response
                self.refusals[response.status_code] += 1
            except httpx.TransportError:
                self.refusals[0] += 1
            if key:
                self.resent.add(key)
            assert time.monotonic() < deadline, f"{method} {path} kept failing"
            time.sleep(0.2)

    def replies(self) -> int:
        path = f"/v1/conversations/{self.conversation}/messages"
        messages = self._call("GET", path).json()["messages"]
        return sum(1 for m in messages if m["role"] == "agent")

    def run(self) -> None:
        path = f"/v1/conversations/{self.conversation}/messages"
        for n in range(MESSAGES):
            key = f"{self.name}-{n}"
            self._call("POST", path, {"client_id": key, "text": key}, key).raise_for_status()
            self.sent.append(key)
            wait_for(lambda n=n: self.replies() > n, timeout=60)


def test_a_postgres_restart_under_load_loses_and_doubles_nothing(
    tmp_path: Path, postgres_kept_up: None
) -> None:
    model = write_script(
        tmp_path / "script.json", [{"delay": 0.2, **say("ok", final=True)}], then="repeat_last"
    )
    with fresh_database("postgresql", tmp_path) as url:
        api = ServerProcess(
            tmp_path / "api", url, model=model, executor_id="api", env={"NIGHTOWL_ROLE": "api"}
        ).start()
        worker = ServerProcess(
            tmp_path / "worker",
            url,
            model=model,
            executor_id="worker",
            env={"NIGHTOWL_ROLE": "worker"},
        ).start()
        try:
            chatters = [Chatter(api, f"c{n}") for n in range(CLIENTS)]
            failures: list[BaseException] = []

            def chat(chatter: Chatter) -> None:
                try:
                    chatter.run()
                except BaseException as error:
                    failures.append(error)

            threads = [threading.Thread(target=chat, args=(c,)) for c in chatters]
            for thread in threads:
                thread.start()
            # Restart once the load runs: some replies arrived, more are on the way.
            wait_for(lambda: sum(len(c.sent) for c in chatters) >= CLIENTS * 3, timeout=60)
            started_before = _started_at()
            _cluster("restart")
            assert sum(len(c.sent) for c in chatters) < CLIENTS * MESSAGES  # still loaded
            for thread in threads:
                thread.join(timeout=240)
            assert not failures, failures
            assert all(len(c.sent) == MESSAGES for c in chatters)
            for chatter in chatters:
                # A 503 the client resent, or a connection cut by the restart; never a 500.
                assert set(chatter.refusals) <= {0, 503}, chatter.refusals
                assert len(chatter.resent) <= 1, chatter.resent
                stored = rows(
                    url,
                    "SELECT role, body FROM messages WHERE conversation_id = :c ORDER BY seq",
                    c=chatter.conversation,
                )
                # Each message once, in order, each answered once.
                assert [b for r, b in stored if r == "user"] == chatter.sent
                assert [b for r, b in stored if r == "agent"] == ["ok"] * MESSAGES
            # No turn stuck. A turn the outage cut off between its steps may end as
            # interrupted, its messages answered by the next turn (each once: above).
            stuck = "SELECT id, status FROM turns WHERE status IN ('queued', 'running')"
            wait_for(lambda: rows(url, stuck) == [], timeout=60)
            ended = rows(url, "SELECT DISTINCT status FROM turns")
            assert {status for (status,) in ended} <= {"done", "interrupted"}, ended
            assert _started_at() > started_before  # the restart really happened
        finally:
            api.stop()
            worker.stop()
