"""POST a message → its change notification arrives over SSE: p50/p95 per database.

Beside it, a bare INSERT + COMMIT on the same database measured in the same run; the ratio
is the figure that survives a noisy machine. The `postgresql_split` case runs an API process
(`--role api`, no queue polling) beside a worker and measures against the API process; its
p50 over SQLite's, in the same run, is `split_over_sqlite_p50`. Prints one JSON object.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

from common import (
    BACKENDS,
    ServerProcess,
    bare_commit_ms,
    fresh_database,
    percentile,
    wait_for,
)

ROUNDS = 200


def measure(backend: str, folder: Path, split: bool = False) -> dict[str, float]:
    with fresh_database(backend, folder) as url:
        role = {"NIGHTOWL_ROLE": "api"} if split else {}
        server = ServerProcess(folder / "data", url, executor_id="api", env=role).start()
        worker = (
            ServerProcess(
                folder / "worker", url, executor_id="worker", env={"NIGHTOWL_ROLE": "worker"}
            ).start()
            if split
            else None
        )
        try:
            with server.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
            arrived: dict[int, float] = {}
            connected = threading.Event()

            def listen() -> None:
                with (
                    server.client() as client,
                    client.stream("GET", "/v1/events", timeout=None) as stream,
                ):
                    for line in stream.iter_lines():
                        connected.set()
                        if line.startswith("data:"):
                            change = json.loads(line[5:])
                            arrived.setdefault(change["seq"], time.perf_counter())
                            if change["seq"] >= ROUNDS:
                                return

            listener = threading.Thread(target=listen, daemon=True)
            listener.start()
            connected.wait(10)
            sent: dict[int, float] = {}
            with server.client() as client:
                path = f"/v1/conversations/{conversation}/messages"
                for _ in range(5):  # warm-up: connections, caches
                    client.get(path, params={"after": 0})
                for n in range(1, ROUNDS + 1):
                    started = time.perf_counter()
                    response = client.post(path, json={"client_id": f"b{n}", "text": f"msg {n}"})
                    response.raise_for_status()
                    sent[response.json()["seq"]] = started
                    wait_for(lambda n=n: n in arrived, timeout=10, interval=0.0005)
            latencies = [(arrived[seq] - sent[seq]) * 1000 for seq in sent]
            bare = bare_commit_ms(url)
        finally:
            server.stop()
            if worker is not None:
                worker.stop()
    result = {
        "post_to_notify_p50_ms": round(percentile(latencies, 50), 3),
        "post_to_notify_p95_ms": round(percentile(latencies, 95), 3),
        "bare_commit_p50_ms": round(percentile(bare, 50), 3),
        "rounds": ROUNDS,
    }
    result["ratio_p50"] = round(result["post_to_notify_p50_ms"] / result["bare_commit_p50_ms"], 2)
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        report: dict[str, object] = {
            backend: measure(backend, Path(folder) / backend) for backend in BACKENDS
        }
        split = measure("postgresql", Path(folder) / "postgresql_split", split=True)
    report["postgresql_split"] = split
    sqlite = report["sqlite"]
    assert isinstance(sqlite, dict)
    report["split_over_sqlite_p50"] = round(
        split["post_to_notify_p50_ms"] / sqlite["post_to_notify_p50_ms"], 2
    )
    report["targets"] = {"post_to_notify_p50_ms": 20, "ratio_p50": 10, "split_over_sqlite_p50": 1.5}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
