"""Idle costs nothing: 20 routines gated by watches on pages that do not change.

Two measures, each on SQLite and PostgreSQL:

- **A simulated day** (clock driven, in this process): 20 routines every 10 minutes, each
  watching its own page on a local web server (another process, so its CPU is not counted),
  fired for every due time of 24 hours through the real firing path (claim, the watch's fetch
  through the address checks, judge, record). `cpu_percent` is this process's CPU for that day's
  firings over the seconds of a day, of one core. The baseline in the same run is a bare
  `httpx.get` of the same page (the floor of any check): `cpu_per_firing_vs_bare_fetch`.
- **A real server** with the same 20 routines every minute, left alone for `SERVER_WINDOW_S`:
  its CPU (scheduler, watches, everything) as a percentage of one core, and the firings its
  scheduler ran.

Both count the model tokens spent (from the server's own records: model_calls) and the messages
written: an unchanged page wakes nothing. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select, update

from common import BACKENDS, ROOT, ServerProcess, free_port, fresh_database, wait_for
from nightowl.engine.routine_firings import RoutineFirings
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.watches import Watch
from nightowl.router.router import Router
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.routines import create_routine
from nightowl.store.tables import Message, ModelCall, Routine, RoutineFiring
from nightowl.store.users import ensure_owner
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher

sys.path.insert(0, str(ROOT))
from tests.store.test_store import RecordingQueue

ROUTINES = 20
DAY_CRON = "*/10 * * * *"  # 144 due times a day each
SERVER_CRON = "* * * * *"
SERVER_WINDOW_S = 120
START = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
TICKS = os.sysconf("SC_CLK_TCK")


def _pages(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A static web server in its own process, serving ROUTINES pages that never change."""
    for n in range(ROUTINES):
        (root / f"page{n}.html").write_text(
            f"<html><body><h1>Status {n}</h1><p>All systems go.</p></body></html>"
        )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{base}/page0.html"), timeout=30)
    return server, base


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _routines(database: Database, base: str, cron: str, accounted: datetime | None) -> list[str]:
    ids = []
    with database.write() as session:
        owner = ensure_owner(session)
        for n in range(ROUTINES):
            conversation = create_conversation(session, owner.id)
            routine = create_routine(
                session,
                owner.id,
                conversation.id,
                name=f"status {n}",
                prompt="tell me what changed on the status page",
                cron=cron,
                timezone="UTC",
                created_by="owner",
                watch=Watch(kind="url", target=f"{base}/page{n}.html"),
            )
            if accounted is not None:
                session.execute(
                    update(Routine)
                    .where(Routine.id == routine.id)
                    .values(accounted_until=accounted, created_at=accounted)
                )
            ids.append(routine.id)
    return ids


def _spent(database: Database) -> dict[str, int]:
    with database.read() as session:
        tokens = session.scalar(
            select(func.coalesce(func.sum(ModelCall.input_tokens + ModelCall.output_tokens), 0))
        )
        outcomes = dict(
            session.execute(
                select(RoutineFiring.outcome, func.count()).group_by(RoutineFiring.outcome)
            ).all()
        )
        messages = session.scalar(select(func.count()).select_from(Message))
    return {
        "model_tokens": int(tokens or 0),
        "messages": int(messages or 0),
        "firings": sum(outcomes.values()),
        "skipped": int(outcomes.get("skipped", 0)),
        "ran": int(outcomes.get("ran", 0)),
        "failed": int(outcomes.get("failed", 0)),
    }


def simulated_day(url: str, base: str) -> dict[str, Any]:
    database = Database(url)
    upgrade(database)
    try:
        ids = _routines(database, base, DAY_CRON, START)
        router = Router(database, RecordingQueue())
        fetcher = PinnedFetcher(AddressPolicy(allow_private=True))  # the pages are on loopback
        checks = WatchChecks(database, Path(tempfile.mkdtemp()), fetcher)
        now = [START]
        firings = RoutineFirings(database, router, lambda: now[0], checks)
        due_times = [START + timedelta(minutes=10 * k) for k in range(1, 145)]
        cpu = time.process_time()
        for due in due_times:
            now[0] = due + timedelta(seconds=1)
            for routine_id in ids:
                firings.fire_due(routine_id, due)
        cpu_s = time.process_time() - cpu
        spent = _spent(database)
    finally:
        database.dispose()
    bare = _bare_fetch_cpu_s(f"{base}/page0.html")
    per_firing = cpu_s / max(spent["firings"], 1)
    return {
        **spent,
        "cpu_s": round(cpu_s, 2),
        "cpu_percent": round(cpu_s / 86_400 * 100, 4),
        "cpu_ms_per_firing": round(per_firing * 1000, 2),
        "bare_fetch_cpu_ms": round(bare * 1000, 2),
        "cpu_per_firing_vs_bare_fetch": round(per_firing / bare, 1),
    }


def _bare_fetch_cpu_s(url: str, rounds: int = 200) -> float:
    cpu = time.process_time()
    for _ in range(rounds):
        with httpx.Client() as client:  # a connection per check, as the watch makes
            client.get(url)
    return (time.process_time() - cpu) / rounds


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def real_server(url: str, base: str, data_dir: Path) -> dict[str, Any]:
    database = Database(url)
    upgrade(database)
    try:
        _routines(database, base, SERVER_CRON, None)
        server = ServerProcess(
            data_dir, url, env={"NIGHTOWL_WEB_FETCH_PRIVATE": "1"}, model="none"
        ).start()
        try:
            # The first round records what each page shows; measure after it.
            wait_for(lambda: _spent(database)["firings"] >= ROUTINES, timeout=150, interval=1)
            time.sleep(5)
            assert server.process is not None
            before, fired = _cpu_seconds(server.process.pid), _spent(database)["firings"]
            started = time.monotonic()
            time.sleep(SERVER_WINDOW_S)
            elapsed = time.monotonic() - started
            cpu = _cpu_seconds(server.process.pid) - before
            spent = _spent(database)
        finally:
            server.stop()
    finally:
        database.dispose()
    return {
        **spent,
        "window_s": round(elapsed),
        "firings_in_window": spent["firings"] - fired,
        "cpu_percent": round(cpu / elapsed * 100, 2),
    }


def main() -> None:
    report: dict[str, Any] = {"routines": ROUTINES, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as scratch:
        pages, base = _pages(Path(scratch))
        try:
            for backend in BACKENDS:
                for folder in (backend, f"{backend}-server"):
                    (Path(scratch) / folder).mkdir()
                with fresh_database(backend, Path(scratch) / backend) as url:
                    report[f"day_{backend}"] = simulated_day(url, base)
                with fresh_database(backend, Path(scratch) / f"{backend}-server") as url:
                    data = Path(scratch) / f"{backend}-data"
                    report[f"server_{backend}"] = real_server(url, base, data)
        finally:
            pages.terminate()
            pages.wait()
    day = [report[f"day_{b}"] for b in BACKENDS]
    report["model_tokens"] = sum(d["model_tokens"] for d in day) + sum(
        report[f"server_{b}"]["model_tokens"] for b in BACKENDS
    )
    report["cpu_percent"] = max(d["cpu_percent"] for d in day)
    report["firings"] = sum(d["firings"] for d in day)
    report["skipped"] = sum(d["skipped"] for d in day)
    report["targets"] = {"model_tokens": 0, "cpu_percent": 1}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
