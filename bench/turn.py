"""Harness overhead per durable step: turn wall time minus model and tool time, per step.

A scripted model at zero delay calls `load_tools` (a tool that does almost nothing) K times,
then a final `send_to_user`. Overhead per step = (turn time - Σ model-call time - Σ tool time)
/ number of steps, taken from the server's own records; p50 over many turns, on SQLite and
PostgreSQL, beside a bare INSERT + COMMIT on the same database. The same again with tracing on
(`step_overhead_traced_p50_ms`): every span exported over OTLP/HTTP to a loopback sink that
accepts and drops it. Prints one JSON object.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from common import (
    BACKENDS,
    ServerProcess,
    bare_commit_ms,
    dbos_floor_ms,
    fresh_database,
    percentile,
    wait_for,
    write_script,
)

TOOL_STEPS = 10
TURNS = 15
# take_batch + (model + tool) per tool step + final model call + final tool + finish
STEPS_PER_TURN = 1 + 2 * TOOL_STEPS + 2 + 1


def _script(path: Path) -> str:
    queries = ["wait", "send"]
    replies: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "load_tools", "arguments": {"query": queries[n % 2]}}]}
        for n in range(TOOL_STEPS)
    ]
    replies.append(
        {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "done", "final": True}}]}
    )
    return write_script(path, replies)


def _seconds(engine: Any, sql: str, **params: Any) -> float:
    with engine.connect() as connection:
        value = connection.execute(text(sql), params).scalar()
    return float(value or 0)


def _durations(engine: Any, conversation: str) -> tuple[float, float, float]:
    def spans(table: str) -> float:
        with engine.connect() as connection:
            found = connection.execute(
                text(f"SELECT started_at, finished_at FROM {table} WHERE conversation_id = :c"),
                {"c": conversation},
            ).all()
        return sum(_delta(a, b) for a, b in found)

    with engine.connect() as connection:
        started, finished = connection.execute(
            text("SELECT started_at, finished_at FROM turns WHERE conversation_id = :c"),
            {"c": conversation},
        ).one()
    return _delta(started, finished), spans("model_calls"), spans("tool_runs")


def _delta(a: Any, b: Any) -> float:
    from datetime import datetime

    if isinstance(a, str):
        a, b = datetime.fromisoformat(a), datetime.fromisoformat(b)
    return (b - a).total_seconds()


class _DroppingSink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts every export and keeps nothing."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def otlp_sink() -> Iterator[str]:
    """A loopback OTLP endpoint (its base URL) for as long as the block runs."""
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _DroppingSink)
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sink.server_address[1]}"
    finally:
        sink.shutdown()
        thread.join(timeout=5)


class _Server:
    """A server under measurement: its process, its store, its overheads so far."""

    def __init__(self, url: str, folder: Path, env: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        model = _script(folder / "script.json")
        self.process = ServerProcess(folder / "data", url, model=model, env=env).start()
        self.engine = create_engine(url)
        self.overheads: list[float] = []

    def turn(self, keep: bool) -> None:
        """One turn; its harness overhead per step (ms) is kept unless it warms up."""
        with self.process.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "go", "text": "go"},
            )
        wait_for(
            lambda: _seconds(
                self.engine,
                "SELECT COUNT(*) FROM turns WHERE conversation_id = :c AND status = 'done'",
                c=conversation,
            ),
            timeout=60,
            interval=0.01,
        )
        if keep:
            turn, model, tools = _durations(self.engine, conversation)
            self.overheads.append((turn - model - tools) / STEPS_PER_TURN * 1000)

    def stop(self) -> None:
        self.process.stop()
        self.engine.dispose()


def measure(backend: str, folder: Path) -> dict[str, float]:
    # Untraced and traced (exporting to a loopback sink) side by side, turn about, so what
    # else the machine does weighs on both alike.
    with (
        otlp_sink() as sink,
        fresh_database(backend, folder / "untraced") as url,
        fresh_database(backend, folder / "traced") as traced_url,
    ):
        plain = _Server(url, folder / "untraced")
        traced = _Server(traced_url, folder / "traced", {"NIGHTOWL_OTLP_ENDPOINT": sink})
        try:
            for n in range(TURNS + 2):
                for server in (plain, traced):
                    server.turn(keep=n >= 2)  # two turns of warm-up
        finally:
            plain.stop()
            traced.stop()
        overheads = plain.overheads
        bare = bare_commit_ms(url)
        floor = dbos_floor_ms(url if backend == "postgresql" else "")
    result = {
        "step_overhead_p50_ms": round(percentile(overheads, 50), 3),
        "step_overhead_p95_ms": round(percentile(overheads, 95), 3),
        "step_overhead_traced_p50_ms": round(percentile(traced.overheads, 50), 3),
        "step_overhead_traced_p95_ms": round(percentile(traced.overheads, 95), 3),
        "bare_commit_p50_ms": round(percentile(bare, 50), 3),
        "dbos_empty_step_p50_ms": floor,
        "steps_per_turn": STEPS_PER_TURN,
        "turns": TURNS,
    }
    result["ratio_p50"] = round(result["step_overhead_p50_ms"] / result["bare_commit_p50_ms"], 2)
    # nightowl's whole cost per step (its own writes and DBOS's) against DBOS alone running
    # empty steps, configured as the server configures it, in the same run.
    result["step_overhead_vs_dbos"] = round(result["step_overhead_p50_ms"] / floor, 2)
    # What tracing on (spans made, batched and exported) adds to a step.
    result["traced_vs_untraced"] = round(
        result["step_overhead_traced_p50_ms"] / result["step_overhead_p50_ms"], 2
    )
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        report: dict[str, Any] = {
            backend: measure(backend, Path(folder) / backend) for backend in BACKENDS
        }
    report["targets"] = {
        "step_overhead_p50_ms": 5,
        "step_overhead_vs_dbos": 1.5,
        "traced_vs_untraced": 1.1,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
