"""What the computer tier adds to a tool call: `true` run in a user's sandbox through a
`nightowl computer-host` process (HTTP on 127.0.0.1, the tier's token) against the same call on
a sandbox in this process. Both computers are awake and held, as within a turn.

Prints JSON; `remote_tool_overhead_ms` (p50 remote minus p50 in process) is what bench/scale.py
reports. Target: under 5 ms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402
from tests.computer.tier import TOKEN, ComputerHostProcess  # noqa: E402

from nightowl.computer.computers import Computers, ComputerSettings  # noqa: E402
from nightowl.computer.remote import RemoteComputers  # noqa: E402
from nightowl.store.database import Database  # noqa: E402
from nightowl.store.migrate import upgrade  # noqa: E402
from nightowl.store.users import create_user  # noqa: E402

UID_BASE = 3_650_000


async def _true_calls(
    computers: Computers | RemoteComputers, user: str, rounds: int
) -> list[float]:
    """Milliseconds per `true` in the user's sandbox (the first call, which boots it, left out)."""
    samples = []
    for n in range(rounds + 1):
        started = perf_counter()
        sandbox = await computers.acquire(user, "bench-turn")
        result = await sandbox.run("true", output=".nightowl/bench.log")
        assert result.exit_code == 0
        if n:
            samples.append((perf_counter() - started) * 1000)
    await computers.release("bench-turn")
    return samples


@dataclass
class NearAndFar:
    """A sandbox set in this process and a computer host beside it, one user each."""

    local: Computers
    tier: RemoteComputers
    near: str  # a user whose computer runs here
    far: str  # a user whose computer runs on the host


@contextmanager
def near_and_far(prefix: str, uid_base: int) -> Iterator[NearAndFar]:
    """A fresh SQLite store, computers in this process and a `nightowl computer-host`
    process on 127.0.0.1 (the tier's token), each with a user of its own."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        root = Path(folder)
        url = f"sqlite:///{root / 'store.db'}"
        database = Database(url)
        upgrade(database)
        with database.write() as session:
            near, far = create_user(session, "near").id, create_user(session, "far").id
        settings = ComputerSettings(
            homes_dir=root / "homes", snapshot_dir=root / "blobs", network="none",
            uid_base=uid_base,
        )  # fmt: skip
        local = Computers(settings, database)
        env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
        env["NIGHTOWL_SANDBOX_UID_BASE"] = str(uid_base + 50)
        host = ComputerHostProcess(root / "host", url, env=env).start()
        try:
            yield NearAndFar(
                local, RemoteComputers([host.url], TOKEN, database, wait_s=30), near, far
            )
        finally:
            host.stop()
            local.close()
            database.dispose()


def remote_tool_overhead(rounds: int = 200) -> dict[str, float]:
    """The tier's added milliseconds per tool call, with both sides' p50 and p95."""
    with near_and_far("nightowl-tier-bench-", UID_BASE) as pair:
        in_process = asyncio.run(_true_calls(pair.local, pair.near, rounds))
        remote = asyncio.run(_true_calls(pair.tier, pair.far, rounds))
    return {
        "in_process_p50_ms": round(percentile(in_process, 50), 2),
        "in_process_p95_ms": round(percentile(in_process, 95), 2),
        "remote_p50_ms": round(percentile(remote, 50), 2),
        "remote_p95_ms": round(percentile(remote, 95), 2),
        "remote_tool_overhead_ms": round(percentile(remote, 50) - percentile(in_process, 50), 2),
    }


if __name__ == "__main__":
    print(json.dumps(remote_tool_overhead(), indent=2))
