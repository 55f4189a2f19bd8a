"""Across turns, tool calls and tool loading, every model request repeats its predecessor's
prefix: the only cache breaks are explained ones (a tool loaded); on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.mark.parametrize("lifetime", ["300", "0.001"])
def test_requests_only_grow_at_the_end(tmp_path: Path, database_url: str, lifetime: str) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            _call("load_tools", query="shell"),
            _call("shell", command="echo hi"),
            say("one", final=True),
            _call("write_file", path="a.txt", content="x"),
            say("two", final=True),
            say("three", final=True),
        ],
    )
    env = {"NIGHTOWL_SANDBOX_NETWORK": "none", "NIGHTOWL_CACHE_LIFETIME_S": lifetime}
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            for n, answer in enumerate(["one", "two", "three"]):
                client.post(path, json={"client_id": f"m{n}", "text": f"task {n}"})
                wait_for(
                    lambda: (
                        answer  # noqa: B023
                        in [m["body"] for m in client.get(path).json()["messages"]]
                    ),
                    timeout=30,
                )
        calls = rows(
            database_url,
            "SELECT sections, cache_break, cache_break_explained, meter_prompt_tokens,"
            " meter_prefix_tokens FROM model_calls"
            " WHERE conversation_id = :c AND step >= 0 ORDER BY started_at",  # not reviews
            c=conversation,
        )
    finally:
        server.stop()
    assert len(calls) == 6
    sections = [s if isinstance(s, list) else json.loads(s) for s, *_ in calls]
    breaks = [(b, e) for _, b, e, _, _ in calls if b is not None]
    assert breaks == [("tool:shell: a tool was loaded", True)]
    for before, after in itertools.pairwise(sections):
        # Besides a tool loaded in between, the request repeats all of its predecessor, its
        # newest note too (kept in the history where it was said), and grows only at the end.
        loaded = {s[0] for s in after if s[0].startswith("tool:")} - {s[0] for s in before}
        rest = [section for section in after if section[0] not in loaded]
        assert rest[: len(before) - 1] == before[:-1]
        assert [s[1] for s in rest[: len(before)]] == [s[1] for s in before]
        assert len(rest) > len(before)

    # The prefix-cache meter: within the cache lifetime each request (after the tool load)
    # finds most of itself already sent; past the lifetime nothing counts as cached.
    meter = [(prompt, prefix) for *_, prompt, prefix in calls]
    assert all(prompt > 0 for prompt, _ in meter) and meter[0][1] == 0
    if lifetime == "300":
        assert all(prefix / prompt > 0.5 for prompt, prefix in meter[2:]), meter
    else:
        assert all(prefix == 0 for _, prefix in meter), meter
