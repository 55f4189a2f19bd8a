"""The router on one process: ingest rate, trigger → first model request, preemption latency.

- ingest_per_s: triggers through the router's entry point inside one running server process
  (the app's own services: store, DBOS engine, turns answering meanwhile), from 8 threads over
  8 webhook conversations, one in five a duplicate delivery; each is deduped, stored and its
  turn enqueued. Checked afterwards: one stored message per distinct trigger.
- ingest_http_per_s: the same as signed webhook deliveries over HTTP from 8 client threads on
  the same two cores (HMAC check, FastAPI, uvicorn and the client's own CPU included).
- trigger_to_model: an owner's direct message's `created_at` to the start of the first model
  call of its turn (scripted model, zero delay), both stamped by the server.
- preempt: the owner's correction sent → the running turn (in a 30 s tool) marked stopped.

Baselines measured in the same run, because these machines are noisy:
- `store_append_per_s`: plain appends of one message each, one commit each, one thread, on the
  same database;
- `http_roundtrip_p50_ms`: GET /healthz on the same server (`SELECT 1` on the store).
`ingest_vs_store_append` and `trigger_to_model_vs_http_roundtrip` are the ratios to them.
Prints one JSON object with an entry per database.
"""

from __future__ import annotations

import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from common import (
    BACKENDS,
    ServerProcess,
    free_port,
    fresh_database,
    percentile,
    wait_for,
    write_script,
)
from nightowl.app import start_services, stop_services
from nightowl.channels.webhooks import sign
from nightowl.config import Settings
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage
from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database

INGEST_SECONDS = 6.0
LATENCY_ROUNDS = 30
PREEMPT_ROUNDS = 12


def _at(value: Any) -> float:
    return (datetime.fromisoformat(value) if isinstance(value, str) else value).timestamp()


def ingest_http(server: ServerProcess) -> float:
    with server.client() as client:
        hook = client.post("/v1/hooks", json={"name": "bench"}).json()
    deadline = time.monotonic() + INGEST_SECONDS
    counts = []

    def sender(worker: int) -> int:
        sent = 0
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while time.monotonic() < deadline:
                event = f"{worker}-{sent - sent % 5 if sent % 5 == 4 else sent}"  # 1 in 5 repeats
                body = json.dumps({"event": event}).encode()
                stamp = str(int(time.time()))
                response = http.post(
                    hook["url_path"],
                    content=body,
                    headers={
                        "X-Nightowl-Timestamp": stamp,
                        "X-Nightowl-Signature": sign(hook["secret"], stamp, body),
                        "X-Nightowl-Delivery": event,
                    },
                )
                response.raise_for_status()
                sent += 1
        return sent

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        counts = list(pool.map(sender, range(8)))
    return sum(counts) / (time.monotonic() - started)


def ingest_in_process(url: str, folder: Path, model: str) -> tuple[float, str]:
    """Triggers per second, and the URL of the store they went to."""
    settings = Settings(
        data_dir=folder / "in-process",
        database_url=url if url.startswith("postgresql") else None,
        model=model,
        port=free_port(),
    )
    app = FastAPI()
    start_services(app, settings)
    try:
        database = app.state.database
        router = app.state.router
        with database.read() as session:
            owner = session.execute(text("SELECT id FROM users")).scalar_one()
        with database.write() as session:
            conversations = [
                create_conversation(session, owner, kind="group", channel="webhook").id
                for _ in range(8)
            ]
        deadline = time.monotonic() + INGEST_SECONDS

        def sender(worker: int) -> tuple[int, set[str]]:
            sent, keys = 0, set()
            while time.monotonic() < deadline:
                event = f"{worker}-{sent - sent % 5 if sent % 5 == 4 else sent}"  # 1 in 5 repeats
                keys.add(event)
                router.accept(
                    IncomingMessage(
                        source="webhook",
                        idempotency_key=event,
                        conversation_id=conversations[worker],
                        text=json.dumps({"event": event}),
                        trust="untrusted",
                        priority=Priority.WEBHOOK,
                    )
                )
                sent += 1
            return sent, keys

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(sender, range(8)))
        rate = sum(sent for sent, _ in results) / (time.monotonic() - started)
        with database.read() as session:
            stored = session.execute(
                text("SELECT COUNT(*) FROM messages WHERE role = 'user'")
            ).scalar_one()
        distinct = sum(len(keys) for _, keys in results)
        assert stored == distinct, f"{stored} messages stored for {distinct} distinct triggers"
        return rate, settings.store_url
    finally:
        stop_services(app)


def store_append_rate(url: str) -> float:
    """Baseline: one message appended and committed at a time, without the router (on the
    store the in-process ingest has just used)."""
    database = Database(url)
    try:
        with database.read() as session:
            owner = session.execute(text("SELECT id FROM users")).scalar_one()
        with database.write() as session:
            conversation = create_conversation(session, owner, kind="group", channel="webhook").id
        count, started = 0, time.monotonic()
        while time.monotonic() - started < 2.0:
            with database.write() as session:
                append_message(session, conversation, role="user", body="{}", trust="untrusted")
            count += 1
        return count / (time.monotonic() - started)
    finally:
        database.dispose()


def http_roundtrip(server: ServerProcess) -> list[float]:
    """Baseline: a request that only runs `SELECT 1` on the store."""
    latencies = []
    with server.client() as client:
        for _ in range(LATENCY_ROUNDS + 3):
            started = time.perf_counter()
            client.get("/healthz")
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies[3:]


def trigger_to_model(server: ServerProcess, engine: Any) -> list[float]:
    latencies = []
    with server.client() as client:
        for n in range(LATENCY_ROUNDS + 3):
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            message = client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "t", "text": "hi"},
            ).json()

            def first_call(c: str = conversation) -> Any:
                with engine.connect() as connection:
                    return connection.execute(
                        text("SELECT MIN(started_at) FROM model_calls WHERE conversation_id = :c"),
                        {"c": c},
                    ).scalar()

            started = wait_for(first_call, timeout=30, interval=0.005)
            if n >= 3:  # warm-up
                latencies.append((_at(started) - _at(message["created_at"])) * 1000)
            time.sleep(0.2)
    return latencies


def preemption(server: ServerProcess, engine: Any) -> list[float]:
    latencies = []
    with server.client() as client:
        for _ in range(PREEMPT_ROUNDS):
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "long task"})

            def waiting(c: str = conversation) -> Any:
                with engine.connect() as connection:
                    return connection.execute(
                        text("SELECT id FROM tool_runs WHERE conversation_id = :c"), {"c": c}
                    ).first()

            wait_for(waiting, timeout=30, interval=0.005)
            time.sleep(0.2)
            sent = time.time()
            client.post(path, json={"client_id": "b", "text": "stop, do this instead"})

            def stopped(c: str = conversation) -> Any:
                with engine.connect() as connection:
                    return connection.execute(
                        text(
                            "SELECT MIN(finished_at) FROM turns WHERE conversation_id = :c"
                            " AND status IN ('preempted', 'interrupted')"
                        ),
                        {"c": c},
                    ).scalar()

            latencies.append((_at(wait_for(stopped, timeout=30, interval=0.005)) - sent) * 1000)
    return latencies


def measure(backend: str, folder: Path) -> dict[str, float]:
    folder.mkdir(parents=True, exist_ok=True)
    answer = [
        {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "ok", "final": True}}]}
    ]
    long_tool = [
        {"tool_calls": [{"name": "wait", "arguments": {"seconds": 30}}]},
        {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "ok", "final": True}}]},
    ]
    with fresh_database(backend, folder) as url:
        engine = create_engine(url)
        model = write_script(folder / "a.json", answer)
        rate, store_url = ingest_in_process(url, folder, model)
        baseline_rate = store_append_rate(store_url)
        server = ServerProcess(folder / "a", url, model=model)
        server.start()
        try:
            rate_http = ingest_http(server)
            to_model = trigger_to_model(server, engine)
            roundtrip = http_roundtrip(server)
        finally:
            server.stop()
        server = ServerProcess(folder / "b", url, model=write_script(folder / "b.json", long_tool))
        server.start()
        try:
            preempt = preemption(server, engine)
        finally:
            server.stop()
            engine.dispose()
    return {
        "ingest_per_s": round(rate, 1),
        "ingest_http_per_s": round(rate_http, 1),
        "trigger_to_model_p50_ms": round(percentile(to_model, 50), 2),
        "trigger_to_model_p95_ms": round(percentile(to_model, 95), 2),
        "preempt_p50_ms": round(percentile(preempt, 50), 2),
        "preempt_p95_ms": round(percentile(preempt, 95), 2),
        "store_append_per_s": round(baseline_rate, 1),
        "http_roundtrip_p50_ms": round(percentile(roundtrip, 50), 2),
        "ingest_vs_store_append": round(rate / baseline_rate, 2),
        "trigger_to_model_vs_http_roundtrip": round(
            percentile(to_model, 50) / percentile(roundtrip, 50), 1
        ),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        report: dict[str, Any] = {b: measure(b, Path(folder) / b) for b in BACKENDS}
    report["targets"] = {
        "ingest_per_s": 500,
        "trigger_to_model_p50_ms": 50,
        "preempt_p95_ms": 250,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
