"""Harness overhead per durable step: turn wall time minus model and tool time, per step.

A scripted model at zero delay calls `load_tools` (a tool that does almost nothing) K times,
then a final `send_to_user`. Overhead per step = (turn time - Σ model-call time - Σ tool time)
/ number of steps, taken from the server's own records; p50 over many turns, on SQLite and
PostgreSQL, beside a bare INSERT + COMMIT on the same database. Prints one JSON object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from common import (
    BACKENDS,
    ServerProcess,
    bare_commit_ms,
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


def _dbos_floor_ms(url: str) -> float:
    """DBOS's own cost per (empty) step on this database, measured in a child process."""
    script = Path(__file__).with_name("dbos_floor.py")
    out = subprocess.run(
        [sys.executable, str(script), url], capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def measure(backend: str, folder: Path) -> dict[str, float]:
    overheads = []
    folder.mkdir(parents=True, exist_ok=True)
    with fresh_database(backend, folder) as url:
        server = ServerProcess(folder / "data", url, model=_script(folder / "script.json")).start()
        engine = create_engine(url)
        try:
            with server.client() as client:
                for n in range(TURNS + 2):
                    conversation = client.post("/v1/conversations", json={}).json()["id"]
                    client.post(
                        f"/v1/conversations/{conversation}/messages",
                        json={"client_id": "go", "text": "go"},
                    )
                    wait_for(
                        lambda c=conversation: _seconds(
                            engine,
                            "SELECT COUNT(*) FROM turns WHERE conversation_id = :c"
                            " AND status = 'done'",
                            c=c,
                        ),
                        timeout=60,
                        interval=0.01,
                    )
                    if n < 2:
                        continue  # warm-up
                    turn, model, tools = _durations(engine, conversation)
                    overheads.append((turn - model - tools) / STEPS_PER_TURN * 1000)
        finally:
            server.stop()
            engine.dispose()
        bare = bare_commit_ms(url)
        floor = _dbos_floor_ms(url if backend == "postgresql" else "")
    result = {
        "step_overhead_p50_ms": round(percentile(overheads, 50), 3),
        "step_overhead_p95_ms": round(percentile(overheads, 95), 3),
        "bare_commit_p50_ms": round(percentile(bare, 50), 3),
        "dbos_empty_step_p50_ms": floor,
        "steps_per_turn": STEPS_PER_TURN,
        "turns": TURNS,
    }
    result["ratio_p50"] = round(result["step_overhead_p50_ms"] / result["bare_commit_p50_ms"], 2)
    # nightowl's whole cost per step (its own writes and DBOS's) against DBOS alone running
    # empty steps, configured as the server configures it, in the same run.
    result["step_overhead_vs_dbos"] = round(result["step_overhead_p50_ms"] / floor, 2)
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        report: dict[str, Any] = {
            backend: measure(backend, Path(folder) / backend) for backend in BACKENDS
        }
    report["targets"] = {"step_overhead_p50_ms": 5, "step_overhead_vs_dbos": 1.5}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
