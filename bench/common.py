"""Shared pieces of the benchmarks: databases, percentiles, a bare-commit baseline."""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.server / tests.databases

from tests.databases import BACKENDS, fresh_database  # noqa: E402
from tests.server import ServerProcess, free_port, wait_for, write_script  # noqa: E402

__all__ = [
    "BACKENDS",
    "ServerProcess",
    "bare_commit_ms",
    "free_port",
    "fresh_database",
    "percentile",
    "wait_for",
    "write_script",
]


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0..100) of the samples."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def bare_commit_ms(url: str, rounds: int = 200) -> list[float]:
    """Latencies of a bare INSERT + COMMIT on the same database, through the raw driver."""
    samples = []
    if url.startswith("sqlite"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("CREATE TABLE IF NOT EXISTS bench_bare (id INTEGER PRIMARY KEY, v TEXT)")
        for n in range(rounds):
            started = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO bench_bare (v) VALUES (?)", (f"v{n}",))
            connection.execute("COMMIT")
            samples.append((time.perf_counter() - started) * 1000)
        connection.close()
        return samples
    dsn = url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS bench_bare (id SERIAL PRIMARY KEY, v TEXT)")
        connection.commit()
        for n in range(rounds):
            started = time.perf_counter()
            connection.execute("INSERT INTO bench_bare (v) VALUES (%s)", (f"v{n}",))
            connection.commit()
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def dbos_floor_ms(url: str) -> float:
    """DBOS's own cost per (empty) step on this database ("" : a SQLite file of its own),
    measured in a child process (bench/dbos_floor.py: DBOS is a process-wide singleton)."""
    script = Path(__file__).with_name("dbos_floor.py")
    out = subprocess.run(
        [sys.executable, str(script), url], capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])
