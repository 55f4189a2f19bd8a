"""A server start: `nightowl serve` until /healthz answers, per database.

Three kinds of start, each NIGHTOWL_STARTUP_ROUNDS times (default 5): on an empty database
(`empty`: the 48 app migrations and DBOS's run), on a migrated copy (`copy`: what most tests
start on, tests/databases.py) and a restart of the same server (`restart`). For each, the
median wall time and the median CPU time the server process had used when it answered (the
figure that survives a busy machine). Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import BACKENDS, ServerProcess, fresh_database

ROUNDS = int(os.environ.get("NIGHTOWL_STARTUP_ROUNDS", "5"))
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _start(server: ServerProcess) -> tuple[float, float]:
    """Wall and CPU seconds until /healthz answers; the server is stopped again."""
    started = time.monotonic()
    server.start()
    wall = time.monotonic() - started
    assert server.process is not None
    cpu = _cpu_s(server.process.pid)
    server.stop()
    return wall, cpu


def measure(backend: str) -> dict[str, dict[str, float]]:
    samples: dict[str, list[tuple[float, float]]] = {"empty": [], "copy": [], "restart": []}
    for _ in range(ROUNDS):
        for kind, migrated in (("empty", False), ("copy", True)):
            with (
                tempfile.TemporaryDirectory() as folder,
                fresh_database(backend, Path(folder), migrated=migrated) as url,
            ):
                server = ServerProcess(Path(folder) / "data", url)
                samples[kind].append(_start(server))
                if migrated:
                    samples["restart"].append(_start(server))
    return {
        kind: {
            "wall_s": round(statistics.median(s[0] for s in runs), 2),
            "cpu_s": round(statistics.median(s[1] for s in runs), 2),
        }
        for kind, runs in samples.items()
    }


if __name__ == "__main__":
    print(json.dumps({"rounds": ROUNDS, **{b: measure(b) for b in BACKENDS}}, indent=2))
