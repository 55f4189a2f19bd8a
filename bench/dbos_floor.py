"""The floor under a nightowl step: DBOS alone running empty async steps, configured exactly as
the server configures it (SQLite in WAL mode, or PostgreSQL). Run as a child of bench/turn.py,
one process per database because DBOS is a process-wide singleton. Prints milliseconds per step.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dbos import DBOS

from nightowl.config import Settings
from nightowl.engine.durable import dbos_config

STEPS = 40


async def measure(settings: Settings) -> float:
    DBOS.destroy(destroy_registry=True)
    DBOS(config=dbos_config(settings))

    @DBOS.step(name="bench.empty")
    async def empty(n: int) -> int:
        return n

    @DBOS.workflow(name="bench.steps")
    async def steps(count: int) -> int:
        for n in range(count):
            await empty(n)
        return count

    DBOS.launch()
    samples = []
    for _ in range(8):
        started = time.perf_counter()
        await steps(STEPS)
        samples.append((time.perf_counter() - started) * 1000 / STEPS)
    DBOS.destroy(destroy_registry=True)
    return statistics.median(samples[2:])


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else ""
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(data_dir=Path(folder), database_url=url or None, port=1)
        print(round(asyncio.run(measure(settings)), 3))


if __name__ == "__main__":
    main()
