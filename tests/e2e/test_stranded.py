"""A workflow DBOS's queue claimed for this worker but never started (the database went away
between the claim and the start: DBOS logs it and leaves it claimed) is started again by the
worker itself, not left until a restart: behind it, a conversation's queue (one turn at a
time) would dispatch nothing more. Seen in a full-suite run of the in-flight outage test."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from dbos import DBOSClient, EnqueueOptions
from sqlalchemy import create_engine, text

from nightowl import __version__
from nightowl.engine.timers import TIMER_QUEUE
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

STATUS = "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = 'stranded-timer'"


def test_a_workflow_claimed_but_never_started_is_started_again(tmp_path: Path) -> None:
    model = write_script(tmp_path / "script.json", [say("noted", final=True)], then="repeat_last")
    with fresh_database("postgresql", tmp_path) as url:
        server = ServerProcess(tmp_path / "data", url, model=model, executor_id="w1").start()
        client = DBOSClient(system_database_url=url)
        try:
            with server.client() as http:
                conversation = http.post("/v1/conversations", json={}).json()["id"]
            # A due timer, claimed by w1 as DBOS's dequeue does, then never started: enqueued
            # far in the future (so no queue takes it), then marked as that claim marks it
            # (due now).
            client.enqueue(
                EnqueueOptions(
                    queue_name=TIMER_QUEUE,
                    workflow_name="nightowl.timer",
                    workflow_id="stranded-timer",
                    app_version=__version__,
                    delay_seconds=3600,
                ),
                "stranded-timer",
                conversation,
                "the stranded one",
            )
            with create_engine(url).begin() as connection:
                claimed = connection.execute(
                    text(
                        "UPDATE dbos.workflow_status SET status = 'PENDING', executor_id = 'w1',"
                        " owner_xid = :x, delay_until_epoch_ms = NULL"
                        " WHERE workflow_uuid = 'stranded-timer'"
                    ),
                    {"x": secrets.token_hex(8)},
                )
                assert claimed.rowcount == 1
            # Started again within the grace (10 s) and a look (every 5 s): it fires once.
            wait_for(
                lambda: rows(url, STATUS) == [("SUCCESS",)],
                timeout=60,
            )
            with server.client() as http:
                wait_for(
                    lambda: (
                        [
                            m["body"]
                            for m in http.get(f"/v1/conversations/{conversation}/messages").json()[
                                "messages"
                            ]
                        ]
                        == ["Timer due: the stranded one", "noted"]
                    ),
                    timeout=60,
                )
            assert any(
                "restarted workflows claimed but never run" in str(line.get("message"))
                for line in server.log_lines()
            )
        finally:
            client.destroy()
            server.stop()
