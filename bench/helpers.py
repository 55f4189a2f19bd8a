"""Helpers, measured on a real server with the scripted model (SQLite and PostgreSQL):

- the main conversation's context after a 20-file reading task done inline against the same
  task handed to a helper (`context_ratio`, target <= 0.1);
- `helper_start_p50_ms`: start_helper's tool call done -> the helper's first model request
  (target < 100 ms); `report_to_parent_model_p50_ms`: the helper's report -> the parent's
  next model request (target < 100 ms);
- `concurrent_helpers`: 20 helpers started at once, all reports back (none lost).

Prints one JSON object. Run `python bench/helpers.py [--quick]`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from common import BACKENDS, ServerProcess, fresh_database, percentile, wait_for

FILES = 20
FILE_TEXT = "".join(
    f"Line {n}: the quarterly figures were revised on 2026-0{n % 9 + 1}-1{n % 9}.\n"
    for n in range(60)
)  # a report of about 4 KB
ROUNDS = 8
CONCURRENT = 20


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _reads() -> list[dict[str, Any]]:
    return [_call("read_file", path=f"docs/report-{n:02d}.txt") for n in range(FILES)]


def _done(text_: str) -> dict[str, Any]:
    return _call("send_to_user", text=text_, final=True)


def _rows(engine: Any, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.execute(text(sql), params))


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _server(folder: Path, url: str, script: dict[str, Any], **env: str) -> ServerProcess:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.json"
    path.write_text(json.dumps({"then": "silent", **script}))
    settings = {"NIGHTOWL_SANDBOX_NETWORK": "none", "NIGHTOWL_MEMORY_PASS": "off", **env}
    return ServerProcess(folder / "data", url, model=f"scripted:{path}", env=settings)


def _owner_home(server: ServerProcess, engine: Any) -> Path:
    (owner,) = _rows(engine, "SELECT id FROM users ORDER BY created_at LIMIT 1")[0]
    home = server.data_dir / "homes" / owner
    (home / "docs").mkdir(parents=True, exist_ok=True)
    for n in range(FILES):
        (home / "docs" / f"report-{n:02d}.txt").write_text(FILE_TEXT)
    for path in [home, home / "docs", *(home / "docs").iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return home


def _ask(server: ServerProcess, text_: str) -> str:
    with server.client() as client:
        conversation = str(client.post("/v1/conversations", json={}).json()["id"])
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "go", "text": text_}
        )
    return conversation


def _last_prompt_tokens(engine: Any, conversation: str) -> int:
    found = _rows(
        engine,
        "SELECT meter_prompt_tokens FROM model_calls WHERE conversation_id = :c AND step >= 0 "
        "ORDER BY started_at DESC LIMIT 1",
        c=conversation,
    )
    return int(found[0][0] or 0)


def _finished(engine: Any, conversation: str, final: str) -> bool:
    found = _rows(
        engine,
        "SELECT count(*) FROM messages WHERE conversation_id = :c AND body = :b",
        c=conversation,
        b=final,
    )
    return bool(found[0][0])


def context_tokens(backend: str, folder: Path) -> dict[str, int]:
    """The main conversation's prompt at its last call: the reading done inline, or by a
    helper that reports in a line."""
    task = "Read the 20 reports in ~/docs and say which dates disagree."
    script = {
        "replies": [*_reads(), _done("Inline: the dates disagree in 20 reports.")],
        "helper": [*_reads(), _call("report", text="Dates disagree in all 20 reports.")],
    }
    delegated = {
        "replies": [
            {
                "tool_calls": [
                    {"name": "start_helper", "arguments": {"task": task}},
                    {"name": "send_to_user", "arguments": {"text": "On it.", "final": True}},
                ]
            },
            _done("Delegated: the dates disagree in 20 reports."),
        ],
        "helper": script["helper"],
    }
    found: dict[str, int] = {}
    for name, given, final in (
        ("inline", script, "Inline: the dates disagree in 20 reports."),
        ("delegated", delegated, "Delegated: the dates disagree in 20 reports."),
    ):
        with fresh_database(backend, folder / name) as url:
            (folder / name).mkdir(parents=True, exist_ok=True)
            server = _server(folder / name, url, given).start()
            engine = create_engine(url)
            try:
                _owner_home(server, engine)
                conversation = _ask(server, task)
                wait_for(lambda e=engine, c=conversation, f=final: _finished(e, c, f), timeout=300)
                found[name] = _last_prompt_tokens(engine, conversation)
            finally:
                server.stop()
                engine.dispose()
    return found


def latencies(backend: str, folder: Path, rounds: int) -> dict[str, float]:
    """start_helper -> the helper's first model request, and its report -> the parent's
    next model request, over `rounds` conversations."""
    script = {
        "replies": [
            {
                "tool_calls": [
                    {"name": "start_helper", "arguments": {"task": "Say hello."}},
                    {"name": "send_to_user", "arguments": {"text": "On it.", "final": True}},
                ]
            },
            _done("Reported."),
        ],
        "helper": [_call("report", text="Hello.")],
    }
    starts, reports = [], []
    with fresh_database(backend, folder) as url:
        server = _server(folder, url, script).start()
        engine = create_engine(url)
        try:
            for _ in range(rounds + 2):
                conversation = _ask(server, "Say hello through a helper.")
                wait_for(lambda c=conversation: _finished(engine, c, "Reported."), timeout=60)
                (helper_conversation,) = _rows(
                    engine,
                    "SELECT conversation_id FROM helpers WHERE parent_conversation_id = :c",
                    c=conversation,
                )[0]
                started = _rows(
                    engine,
                    "SELECT finished_at FROM tool_runs WHERE conversation_id = :c "
                    "AND tool = 'start_helper'",
                    c=conversation,
                )[0][0]
                first = _rows(
                    engine,
                    "SELECT min(started_at) FROM model_calls WHERE conversation_id = :c "
                    "AND step >= 0",
                    c=helper_conversation,
                )[0][0]
                reported = _rows(
                    engine,
                    "SELECT finished_at FROM tool_runs WHERE conversation_id = :c "
                    "AND tool = 'report'",
                    c=helper_conversation,
                )[0][0]
                woke = _rows(
                    engine,
                    "SELECT max(started_at) FROM model_calls WHERE conversation_id = :c "
                    "AND step >= 0",
                    c=conversation,
                )[0][0]
                starts.append((_time(first) - _time(started)).total_seconds() * 1000)
                reports.append((_time(woke) - _time(reported)).total_seconds() * 1000)
        finally:
            server.stop()
            engine.dispose()
    starts, reports = starts[2:], reports[2:]  # warm-up
    return {
        "helper_start_p50_ms": round(percentile(starts, 50), 1),
        "report_to_parent_model_p50_ms": round(percentile(reports, 50), 1),
    }


def concurrent(backend: str, folder: Path) -> dict[str, Any]:
    """20 helpers started in one reply; every report must come back."""
    starts = [
        {"name": "start_helper", "arguments": {"task": f"Task {n}: say {n}."}}
        for n in range(CONCURRENT)
    ]
    script = {
        "replies": [{"tool_calls": starts}, *[_call("wait", seconds=0.01 * n) for n in range(60)]],
        "helper": [_call("wait", seconds=0.2), _call("report", text="Done.")],
    }
    with fresh_database(backend, folder) as url:
        server = _server(folder, url, script, NIGHTOWL_MAX_HELPERS_PER_USER=str(CONCURRENT)).start()
        engine = create_engine(url)
        try:
            conversation = _ask(server, "Start twenty helpers.")

            def reported() -> int:
                return int(
                    _rows(
                        engine,
                        "SELECT count(*) FROM messages WHERE conversation_id = :c "
                        "AND body LIKE 'Helper %Report: Done.%'",
                        c=conversation,
                    )[0][0]
                )

            wait_for(lambda: reported() >= CONCURRENT, timeout=300)
            done = _rows(
                engine,
                "SELECT count(*) FROM helpers WHERE parent_conversation_id = :c "
                "AND status = 'done'",
                c=conversation,
            )[0][0]
            return {"started": CONCURRENT, "reports": reported(), "done": int(done)}
        finally:
            server.stop()
            engine.dispose()


def main() -> None:
    quick = "--quick" in sys.argv
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in BACKENDS:
            root = Path(folder) / backend
            tokens = context_tokens(backend, root / "context")
            result: dict[str, Any] = {
                "main_context_tokens_inline": tokens["inline"],
                "main_context_tokens_delegated": tokens["delegated"],
                "context_ratio": round(tokens["delegated"] / max(tokens["inline"], 1), 3),
                **latencies(backend, root / "latency", 3 if quick else ROUNDS),
                "concurrent_helpers": concurrent(backend, root / "concurrent"),
            }
            report[backend] = result
    report["targets"] = {
        "context_ratio": 0.1,
        "helper_start_p50_ms": 100,
        "report_to_parent_model_p50_ms": 100,
        "concurrent_helpers": CONCURRENT,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
