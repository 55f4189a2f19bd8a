"""Idle costs nothing (SQLite and PostgreSQL): after a turn, the server's own background work on
a conversation — the memory pass, compaction once it is quiet — runs once; then, with nothing
new, a real server left alone (heartbeats, schedulers, idle checks) calls no model at all. A
new message is what spends again. Measured from the server's own model_calls and the
autonomy report's `background` source."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.store_view import calls_finished, rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow

IDLE_S = 20  # many heartbeats (0.5 s), compaction idle windows (2 s) and worker polls


def _calls(url: str) -> list[tuple[str, int, int]]:
    return [
        (str(turn), int(step), int(tokens or 0))
        for turn, step, tokens in rows(
            url,
            "SELECT turn_id, step, input_tokens + cache_read_tokens + cache_write_tokens "
            "+ output_tokens FROM model_calls ORDER BY started_at, id",
        )
    ]


def test_a_quiet_conversation_spends_no_model_tokens(tmp_path: Path, database_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [say("Noted.", final=True), say("Noted again.", final=True)],
        summary="The owner asked to note two things.",
    )
    server = ServerProcess(
        tmp_path / "data",
        database_url,
        model=model,
        env={
            "NIGHTOWL_MEMORY_PASS": "on",
            "NIGHTOWL_COMPACT_AT_TOKENS": "1000",  # the first turn's prompt is larger
            "NIGHTOWL_COMPACT_IDLE_S": "2",
        },
    ).start()
    url = database_url
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m1", "text": "note that the boiler is serviced in March"},
            )
            # The turn, its memory pass and, once quiet, the compaction: each once.
            wait_for(
                lambda: (
                    any(t.startswith("compaction:") for t, _, _ in _calls(url))
                    and calls_finished(url)
                ),
                timeout=90,
            )
            settled = _calls(url)
            assert any(step == -2 for _, step, _ in settled), settled  # the memory pass ran
            before = client.get("/v1/report", params={"days": 1}).json()["total"]
            time.sleep(IDLE_S)
            assert _calls(url) == settled  # nothing new: no model call at all
            after = client.get("/v1/report", params={"days": 1}).json()["total"]
            assert after["tokens"] == before["tokens"]
            assert after["by_source"]["background"] == before["by_source"]["background"]
            assert before["by_source"]["background"]["tokens"] > 0  # it did count them

            # Something new is what spends: the next message runs a turn (and its pass).
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m2", "text": "and the chimney in April"},
            )
            wait_for(lambda: len(_calls(url)) > len(settled), timeout=60)
    finally:
        server.stop()
