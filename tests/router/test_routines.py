"""Routines: they fire on schedule (also after a restart); unapproved ones never fire."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.server import NIGHTOWL, ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow
EVERY_SECOND = "* * * * * *"


def _routine_messages(server: ServerProcess, conversation: str) -> list[dict[str, Any]]:
    with server.client() as client:
        page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m for m in page["messages"] if str(m["body"]).startswith("Routine ")]


def test_a_routine_fires_on_schedule_after_a_restart(tmp_path: Path, database_url: str) -> None:
    server = ServerProcess(tmp_path / "data", database_url).start()
    try:
        with server.client() as client:
            created = client.post(
                "/v1/routines",
                json={"name": "check", "prompt": "check the doc", "cron": EVERY_SECOND},
            )
            assert created.status_code == 201 and created.json()["status"] == "active"
            conversation = created.json()["conversation_id"]
        fired = wait_for(lambda: _routine_messages(server, conversation), timeout=60)
        assert fired[0]["trust"] == "owner" and "check the doc" in fired[0]["body"]
        server.kill()
        server.start()
        restarted = time.time()

        def fired_since_restart() -> list[dict[str, Any]]:
            return [
                m
                for m in _routine_messages(server, conversation)
                if datetime.fromisoformat(m["created_at"]).timestamp() > restarted
            ]

        # It fired before the kill (above); the schedule goes on after the restart by itself.
        assert wait_for(fired_since_restart, timeout=60)
        with server.client() as client:
            routine_id = created.json()["id"]
            assert client.post(f"/v1/routines/{routine_id}/pause").json()["status"] == "paused"
            time.sleep(1.5)
            count = len(_routine_messages(server, conversation))
            time.sleep(2.5)
            assert len(_routine_messages(server, conversation)) == count  # paused: silent
            assert client.delete(f"/v1/routines/{routine_id}").status_code == 204
            assert client.get("/v1/routines").json() == []
    finally:
        server.stop()


def test_a_routine_the_agent_creates_waits_for_approval(tmp_path: Path, database_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "load_tools", "arguments": {"query": "create_routine"}}]},
            {
                "tool_calls": [
                    {
                        "name": "create_routine",
                        "arguments": {"name": "daily", "prompt": "summarise", "cron": EVERY_SECOND},
                    }
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "a", "text": "summarise every morning"},
            )
            routines = wait_for(lambda: client.get("/v1/routines").json(), timeout=30)
            assert routines[0]["status"] == "pending_approval"
            assert routines[0]["created_by"] == "agent"
            time.sleep(3)
            assert _routine_messages(server, conversation) == []  # never fires unapproved
            asked = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            assert any("until you approve" in m["body"] for m in asked)
            approved = client.post(f"/v1/routines/{routines[0]['id']}/approve")
            assert approved.json()["status"] == "active"
            wait_for(lambda: _routine_messages(server, conversation), timeout=30)
    finally:
        server.stop()


def test_bad_schedules_are_refused_with_what_to_write(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        with server.client() as client:
            bad_cron = client.post(
                "/v1/routines", json={"name": "x", "prompt": "y", "cron": "every morning"}
            )
            assert bad_cron.status_code == 422
            assert "0 8 * * 1-5" in bad_cron.json()["error"]["message"]
            bad_zone = client.post(
                "/v1/routines",
                json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "timezone": "Mars/Base"},
            )
            assert bad_zone.status_code == 422 and "IANA" in bad_zone.json()["error"]["message"]
            bad_policy = client.post(
                "/v1/routines",
                json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "catch_up": "sometimes"},
            )
            assert bad_policy.status_code == 422 and "catch_up" in str(bad_policy.json())
            bad_quiet = client.post(
                "/v1/routines",
                json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "quiet_hours": "never"},
            )
            assert bad_quiet.status_code == 422 and "quiet_hours" in str(bad_quiet.json())
            for watch, says in [
                ({"kind": "url", "target": "ftp://example.com/x"}, "http(s) URL with a host"),
                ({"kind": "file", "target": "../elsewhere"}, "inside the computer's home"),
                ({"kind": "rss", "target": "x"}, "watch.kind"),
            ]:
                bad_watch = client.post(
                    "/v1/routines",
                    json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "watch": watch},
                )
                assert bad_watch.status_code == 422, watch
                assert says in str(bad_watch.json()["error"]), bad_watch.json()
            for done_when, says in [
                ({"kind": "file"}, "needs a path"),
                ({"kind": "file", "path": "../../etc/passwd"}, "inside the computer's home"),
                ({"kind": "whenever"}, "done_when.kind"),
            ]:
                bad_done = client.post(
                    "/v1/routines",
                    json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "done_when": done_when},
                )
                assert bad_done.status_code == 422, done_when
                assert says in str(bad_done.json()["error"]), bad_done.json()
            stranger = client.post(
                "/v1/routines",
                json={
                    "name": "x",
                    "prompt": "y",
                    "cron": "0 8 * * *",
                    "watch": {"kind": "webhook", "target": "hook_someone"},
                },
            )
            assert stranger.status_code == 404 and "hooks list" in str(stranger.json())
            # Nothing half-written: no routine, and no conversation made for one.
            assert client.get("/v1/routines").json() == []
            assert not [
                c
                for c in client.get("/v1/conversations").json()
                if c.get("title", "").startswith("Routine:")
            ]
            assert client.post("/v1/routines/rtn_nope/pause").status_code == 404
    finally:
        server.stop()


def test_routines_from_the_command_line(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [NIGHTOWL, "routines", "--url", server.url, *args],
                env=server.env,
                capture_output=True,
                text=True,
            )

        created = cli("create", "standup", "0 9 * * 1-5", "prepare my standup notes")
        assert created.returncode == 0 and "active" in created.stdout
        routine_id = created.stdout.split()[0]
        assert "paused" in cli("pause", routine_id).stdout
        assert "active" in cli("resume", routine_id).stdout
        listed = cli("list").stdout
        assert routine_id in listed and "ran 0, skipped 0, failed 0; catch-up latest" in listed
        assert cli("firings", routine_id).stdout.strip() == "no due time yet"
        assert cli("firings", "rtn_nope").returncode == 2
        bad = cli("create", "x", "whenever", "y")
        assert bad.returncode == 2 and "cron expression" in bad.stderr
        watched = cli(
            "create", "status", "*/5 * * * *", "what changed?", "--watch-url", "https://a.test/s"
        )
        assert watched.returncode == 0 and "watches url https://a.test/s" in watched.stdout
        both = cli(
            "create", "x", "* * * * *", "y", "--watch-url", "https://a.test", "--watch-file", "f"
        )
        assert both.returncode == 2 and "at most one of" in both.stderr
        # A mail folder needs the owner's e-mail channel; --via only goes with imap/resource.
        mail = cli("create", "mail", "*/5 * * * *", "new mail?", "--watch-imap", "INBOX")
        assert mail.returncode == 2 and "e-mail channels (none yet" in mail.stderr
        stray = cli("create", "x", "* * * * *", "y", "--watch-url", "https://a.test", "--via", "m")
        assert stray.returncode == 2 and "--via goes with" in stray.stderr
        resource = cli(
            "create", "n", "* * * * *", "y", "--watch-resource", "notes://latest", "--via", "notes"
        )
        assert resource.returncode == 2 and "'notes' is not one" in resource.stderr
        done = cli("create", "digest", "0 7 * * *", "send the digest", "--done-when-sent")
        assert done.returncode == 0 and "done when a message was sent" in done.stdout
        filed = cli(
            "create", "report", "0 7 * * *", "write it", "--done-when-file", "reports/today.md"
        )
        assert filed.returncode == 0 and "done when reports/today.md was written" in filed.stdout
        outside = cli("create", "r", "0 7 * * *", "w", "--done-when-file", "/etc/passwd")
        assert outside.returncode == 2 and "inside the computer's home" in outside.stderr
        assert cli("delete", done.stdout.split()[0]).returncode == 0
        assert cli("delete", filed.stdout.split()[0]).returncode == 0
        assert cli("delete", routine_id).returncode == 0
        assert cli("delete", watched.stdout.split()[0]).returncode == 0
        assert cli("list").stdout.strip() == ""
    finally:
        server.stop()


def test_a_run_that_sends_nothing_is_not_done_and_the_next_run_is_told(
    tmp_path: Path, database_url: str
) -> None:
    """A real server and turn: the routine's first run ends with private text only, so it is
    `failed: not done`; the second run's notice says so, and that run sends the digest."""
    model = write_script(
        tmp_path / "script.json",
        [
            {"text": "Nothing worth saying, I think."},
            {
                "tool_calls": [
                    {
                        "name": "send_to_user",
                        "arguments": {"text": "Your digest: all quiet.", "final": True},
                    }
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            created = client.post(
                "/v1/routines",
                json={
                    "name": "digest",
                    "prompt": "send me the digest",
                    "cron": "*/4 * * * * *",
                    "done_when": {"kind": "sent"},
                },
            )
            assert created.status_code == 201, created.text
            assert created.json()["done_when"] == {"kind": "sent", "path": None}
            routine_id = created.json()["id"]
            conversation = created.json()["conversation_id"]

            def outcomes() -> list[dict[str, Any]]:
                firings = client.get(f"/v1/routines/{routine_id}/firings").json()
                return list(reversed(firings))

            wait_for(lambda: [f for f in outcomes() if f["outcome"] == "failed"], timeout=60)

            def bodies() -> list[str]:
                page = client.get(f"/v1/conversations/{conversation}/messages").json()
                return [m["body"] for m in page["messages"]]

            wait_for(lambda: "Your digest: all quiet." in bodies(), timeout=60)
            client.post(f"/v1/routines/{routine_id}/pause")
            first_failed = next(f for f in outcomes() if f["outcome"] == "failed")
            assert first_failed["reason"] == (
                "not done: the run ended without sending you a message"
            )
            assert first_failed["turn_id"]  # the run's turn is kept, to open
            told = [
                m["body"]
                for m in _routine_messages(server, conversation)
                if "The previous run" in m["body"]
            ]
            assert told and f"(due {first_failed['due_at']}" in told[0].replace("+00:00", "Z")
            sent = next(f for f in outcomes() if f["due_at"] > first_failed["due_at"])
            # Its turn sent the digest: it stays `ran`, once that turn has ended.
            wait_for(
                lambda: (
                    client.get(f"/v1/conversations/{conversation}").json()["activity"] in ("", None)
                )
            )
            assert next(f for f in outcomes() if f["due_at"] == sent["due_at"])["outcome"] == "ran"
    finally:
        server.stop()


def test_a_server_down_across_three_due_times_catches_up_once_when_started(
    tmp_path: Path, database_url: str
) -> None:
    server = ServerProcess(tmp_path / "data", database_url).start()
    try:
        with server.client() as client:
            created = client.post(
                "/v1/routines",
                json={"name": "tick", "prompt": "check the feed", "cron": "*/3 * * * * *"},
            ).json()
            assert created["catch_up"] == "latest"
            assert created["quiet_hours"] == "run"  # runs inside quiet hours unless told
        fired = wait_for(lambda: _routine_messages(server, created["conversation_id"]), 60)
        server.kill()  # SIGKILL: the schedule's next due times pass while nothing runs
        time.sleep(10)  # at least three due times
        server.start()

        def caught_up() -> list[dict[str, Any]]:
            with server.client() as client:
                firings = client.get(f"/v1/routines/{created['id']}/firings").json()
            return [f for f in firings if f["missed"] >= 3 and f["outcome"] == "ran"]

        [catch_up] = wait_for(caught_up, timeout=60)
        messages = _routine_messages(server, created["conversation_id"])
        said = [m["body"] for m in messages if "Caught up:" in m["body"]]
        assert len(said) == 1 and f"{catch_up['missed']} due time(s)" in said[0]
        assert len(messages) > len(fired)
        with server.client() as client:
            firings = client.get(f"/v1/routines/{created['id']}/firings?limit=1000").json()
            routine = client.get("/v1/routines").json()[0]
        superseded = [f for f in firings if f["reason"].startswith("superseded")]
        assert len(superseded) == catch_up["missed"] - 1
        assert len({f["due_at"] for f in firings}) == len(firings)  # each due time once
        assert routine["outcomes"]["skipped"] >= len(superseded)
        assert routine["outcomes"]["ran"] >= 2
    finally:
        server.stop()
