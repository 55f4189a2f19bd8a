"""Web Push against a stand-in push service (tests/channels/push_service.py) that verifies the
VAPID JWT and decrypts each payload with the device's private key, on SQLite and PostgreSQL:
once per item and device, 410 and 429 handled, quiet hours, and a SIGKILL in between."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.channels.push_service import PushService
from tests.e2e.store_view import rows
from tests.safety.helpers import do
from tests.server import ServerProcess, say, wait_for

pytestmark = pytest.mark.slow

# Each conversation's first call does what its message says; the second reports.
SCRIPT = [{"obey": True}, say("Done.", final=True)]
ROUTINE = do("create_routine", name="news", prompt="summarise the news", cron="0 8 * * *")
UPDATE = do("send_to_user", text="The report for Acme is ready: revenue up 12%.", important=True)
QUIET = do("send_to_user", text="Just so you know.")


def _server(tmp_path: Path, database_url: str, **env: str) -> ServerProcess:
    script = tmp_path / "script.json"
    review = {"create_routine": "BLOCK: no schedule was asked for"}
    script.write_text(json.dumps({"replies": SCRIPT, "then": "silent", "review": review}))
    settings = {
        "NIGHTOWL_PUSH_INSECURE_ENDPOINTS": "true",
        "NIGHTOWL_APPROVAL_TIMEOUT_S": "60",
        **env,
    }
    return ServerProcess(
        tmp_path / "data", database_url, model=f"scripted:{script}", env=settings
    ).start()


def _subscribe(client: httpx.Client, service: PushService, body: dict[str, str]) -> str:
    made = client.post("/v1/push/subscriptions", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _say(client: httpx.Client, title: str, text: str) -> str:
    conversation = client.post("/v1/conversations", json={"title": title}).json()["id"]
    sent = client.post(
        f"/v1/conversations/{conversation}/messages", json={"client_id": "c1", "text": text}
    )
    assert sent.status_code == 201, sent.text
    return str(conversation)


def _published_key(client: httpx.Client) -> bytes:
    key = client.get("/v1/push/key").json()["public_key"]
    return base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))


def test_an_approval_is_pushed_once_per_device_signed_encrypted_and_without_its_text(
    tmp_path: Path, database_url: str
) -> None:
    server = _server(tmp_path, database_url)
    try:
        with PushService() as service, server.client() as client:
            service.server_key = _published_key(client)
            key_file = server.data_dir / "vapid-private.pem"
            assert key_file.stat().st_mode & 0o777 == 0o600
            phone = _subscribe(client, service, service.device("phone"))
            _subscribe(client, service, service.device("laptop"))
            assert len(client.get("/v1/push/subscriptions").json()) == 2
            # An ordinary message is never pushed.
            _say(client, "Chatter", QUIET)
            conversation = _say(client, "Morning news", ROUTINE)
            approval = wait_for(lambda: client.get("/v1/approvals").json())[0]
            wait_for(lambda: service.pushes("phone") and service.pushes("laptop"))
            time.sleep(2.0)  # nothing more comes
            assert service.refused == []
            for device in ("phone", "laptop"):
                [push] = service.pushes(device)
                assert push.payload == {
                    "title": "nightowl needs your approval",
                    "body": "Morning news",
                    "url": f"/#c={conversation}&m={approval['id']}",
                    "tag": approval["id"],
                    "kind": "approval",
                    "urgent": True,
                }
                assert push.headers["Urgency"] == "high" and len(push.headers["Topic"]) <= 32
            assert "schedule" not in str([r.payload for r in service.received])

            # The key is kept: a restart signs with the same one.
            server.stop()
            server.start()
            assert _published_key(client) == service.server_key
            # A device removed by its owner gets nothing more.
            assert client.delete(f"/v1/push/subscriptions/{phone}").status_code == 204
            left = client.get("/v1/push/subscriptions").json()
            assert [s["device"] for s in left] == ["laptop"]
    finally:
        server.stop()


def test_a_gone_device_is_forgotten_and_a_busy_service_is_retried_after_retry_after(
    tmp_path: Path, database_url: str
) -> None:
    server = _server(tmp_path, database_url)
    try:
        with PushService() as service, server.client() as client:
            service.server_key = _published_key(client)
            _subscribe(client, service, service.device("old", (410, {})))
            _subscribe(client, service, service.device("busy", (429, {"Retry-After": "2"})))
            _say(client, "Acme", UPDATE)
            wait_for(lambda: service.pushes("busy"), timeout=30)
            refused, taken = [r for r in service.received if r.device == "busy"]
            assert refused.status == 429 and taken.status == 201
            assert taken.at - refused.at >= 1.9  # not before Retry-After
            assert taken.payload["body"] == "Acme" and "revenue" not in str(taken.payload)
            gone = [r for r in service.received if r.device == "old"]
            assert [r.status for r in gone] == [410]
            devices = client.get("/v1/push/subscriptions").json()
            assert [d["device"] for d in devices] == ["busy"]
            assert rows(database_url, "SELECT status FROM push_deliveries") == [("sent",)]

            # Opted in: the text travels too.
            settings = {"timezone": "UTC", "include_text": True}
            assert client.put("/v1/push/settings", json=settings).status_code == 200
            _say(client, "Acme 2", UPDATE)
            wait_for(lambda: len(service.pushes("busy")) == 2)
            assert "revenue up 12%" in service.pushes("busy")[1].payload["body"]
            assert service.refused == []
    finally:
        server.stop()


def test_quiet_hours_hold_an_update_and_let_an_approval_deadline_through(
    tmp_path: Path, database_url: str
) -> None:
    server = _server(tmp_path, database_url)
    try:
        with PushService() as service, server.client() as client:
            service.server_key = _published_key(client)
            _subscribe(client, service, service.device("phone"))
            now = datetime.now(UTC)
            quiet: dict[str, Any] = {
                "quiet_start": (now - timedelta(hours=1)).strftime("%H:%M"),
                "quiet_end": (now + timedelta(hours=1)).strftime("%H:%M"),
                "timezone": "UTC",
            }
            saved = client.put("/v1/push/settings", json=quiet)
            assert saved.status_code == 200, saved.text
            half = client.put("/v1/push/settings", json={"quiet_start": "22:00"})
            assert half.status_code == 422
            _say(client, "Acme", UPDATE)
            _say(client, "Morning news", ROUTINE)
            wait_for(lambda: service.pushes("phone"))
            time.sleep(2.0)
            assert [p.payload["kind"] for p in service.pushes("phone")] == ["approval"]
            held = rows(database_url, "SELECT status, not_before FROM push_deliveries")
            statuses = sorted(status for status, _ in held)
            assert statuses == ["pending", "sent"]
    finally:
        server.stop()


def test_a_sigkill_between_the_decision_and_the_send_gives_one_push_and_answered_none(
    tmp_path: Path, database_url: str
) -> None:
    # Each push waits 4 s: time to kill the server after it decided and before it sent.
    server = _server(tmp_path, database_url, NIGHTOWL_PUSH_DELAY_S="4")
    try:
        with PushService() as service, server.client() as client:
            service.server_key = _published_key(client)
            _subscribe(client, service, service.device("phone"))
            _say(client, "Acme", UPDATE)
            wait_for(lambda: rows(database_url, "SELECT status FROM push_deliveries"))
            server.kill()
            assert service.received == []
            server.start()
            wait_for(lambda: service.pushes("phone"), timeout=30)
            time.sleep(2.0)
            assert len(service.pushes("phone")) == 1

            # An approval answered before its push would go: no push at all.
            _say(client, "Morning news", ROUTINE)
            approval = wait_for(lambda: client.get("/v1/approvals").json())[0]
            answered = client.post(
                f"/v1/approvals/{approval['id']}", json={"client_id": "a", "decision": "deny"}
            )
            assert answered.status_code == 201, answered.text
            time.sleep(6.0)
            assert len(service.pushes("phone")) == 1
            dropped = rows(
                database_url,
                f"SELECT status FROM push_deliveries WHERE message_id = '{approval['id']}'",
            )
            assert dropped == [("dropped",)]
    finally:
        server.stop()
