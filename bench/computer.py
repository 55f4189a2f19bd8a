"""The computer's speed: sandbox cold start, wake from freeze, wake from deep sleep with a 50 MB
home, and browser launch, each beside `true` run directly in the same run (the baseline).

Prints JSON. Targets: cold start < 50 ms, freeze wake < 10 ms, deep wake (50 MB) < 500 ms;
browser launch is reported (no target).
Every timing ends with a command (`true`) actually run inside the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402

from nightowl.computer.browser import Browsers, BrowserSession  # noqa: E402
from nightowl.computer.computers import Computers, ComputerSettings  # noqa: E402
from nightowl.store.database import Database  # noqa: E402
from nightowl.store.migrate import upgrade  # noqa: E402
from nightowl.store.users import create_user  # noqa: E402

UID_BASE = 3_700_000


def _ms(samples: list[float], name: str) -> dict[str, float]:
    return {
        f"{name}_p50_ms": round(percentile(samples, 50), 2),
        f"{name}_p95_ms": round(percentile(samples, 95), 2),
    }


def baseline_true(rounds: int = 50) -> list[float]:
    """`true` run directly from Python: the floor for anything that starts a process."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(["true"], check=True)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _user(database: Database, name: str) -> str:
    with database.write() as session:
        return create_user(session, name).id


async def cold_start(computers: Computers, rounds: int = 20) -> list[float]:
    """A user's first tool call: a new sandbox from nothing, then `true` inside."""
    samples = []
    for n in range(rounds):
        user = _user(computers.database, f"cold{n}")
        started = time.perf_counter()
        sandbox = await computers.acquire(user, "bench")
        await sandbox.run("true")
        samples.append((time.perf_counter() - started) * 1000)
        await computers.release("bench")
        await computers.destroy(user)
    return samples


async def freeze_wake(computers: Computers, rounds: int = 50) -> list[float]:
    """A frozen sandbox (its turn ended) thawed by the next call, then `true` inside."""
    user = _user(computers.database, "frozen")
    await computers.acquire(user, "warm")
    await computers.release("warm")
    samples = []
    for _ in range(rounds):
        assert computers.state(user) == "frozen"
        started = time.perf_counter()
        sandbox = await computers.acquire(user, "bench")
        await sandbox.run("true")
        samples.append((time.perf_counter() - started) * 1000)
        await computers.release("bench")
    return samples


def _fill_home(home: Path, megabytes: int = 50) -> None:
    """A realistic home: half source-like text, half incompressible data, in ~200 files."""
    rng = os.urandom
    share = megabytes * 1024 * 1024 // 200
    line = b"def handler(event):\n    return {'ok': True, 'event': event}\n"
    text = line * (share // len(line) + 1)
    for n in range(100):
        folder = home / "project" / f"pkg{n % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"module{n}.py").write_bytes(text[:share])
        (home / "data").mkdir(exist_ok=True)
        (home / "data" / f"blob{n}.bin").write_bytes(rng(share))


async def deep_wake(computers: Computers, rounds: int = 10) -> tuple[list[float], int]:
    """A sandbox in deep sleep (home only in its snapshot) restored by the next call."""
    user = _user(computers.database, "sleeper")
    sandbox = await computers.acquire(user, "fill")
    await computers.release("fill")
    await asyncio.to_thread(_fill_home, computers.home(user))
    size = sum(p.stat().st_size for p in computers.home(user).rglob("*") if p.is_file())
    assert sandbox is not None
    samples = []
    for _ in range(rounds):
        assert await computers.deep_sleep(user)
        assert not computers.home(user).exists()
        started = time.perf_counter()
        woken = await computers.acquire(user, "bench")
        await woken.run("true")
        samples.append((time.perf_counter() - started) * 1000)
        await computers.release("bench")
    return samples, size


async def browser_launch(computers: Computers, rounds: int = 8) -> list[float]:
    """Chromium started inside a running sandbox until a page answers (Playwright's driver is
    started once before timing: a server keeps it)."""
    browsers = Browsers(computers)
    user = _user(computers.database, "browsing")
    sandbox = await computers.acquire(user, "bench")

    async def title(session: BrowserSession) -> str:
        return await session.current_page().title()

    samples = []
    try:
        await browsers.use(user, sandbox, title)  # warm: the driver and the profile exist
        for _ in range(rounds):
            await browsers.close_user(user)
            started = time.perf_counter()
            await browsers.use(user, sandbox, title)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        await browsers.close()
        await computers.release("bench")
    return samples


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nightowl-bench-") as folder:
        base = Path(folder)
        database = Database(f"sqlite:///{base / 'store.db'}")
        upgrade(database)
        settings = ComputerSettings(
            homes_dir=base / "homes",
            snapshot_dir=base / "blobs",
            network="none",
            uid_base=UID_BASE,
        )
        computers = Computers(settings, database)
        try:
            baseline = baseline_true()
            cold = await cold_start(computers)
            frozen = await freeze_wake(computers)
            deep, home_bytes = await deep_wake(computers)
            browser = await browser_launch(computers)
            report: dict[str, object] = {"backend": computers.backend.name}
            report.update(_ms(baseline, "baseline_true"))
            report.update(_ms(cold, "cold_start"))
            report.update(_ms(frozen, "freeze_wake"))
            report.update(_ms(deep, "deep_wake_50mb"))
            report["deep_wake_home_bytes"] = home_bytes
            report.update(_ms(browser, "browser_launch"))
            report["cold_start_vs_true"] = round(percentile(cold, 50) / percentile(baseline, 50), 1)
            report["targets_met"] = {
                "cold_start_under_50ms": percentile(cold, 50) < 50,
                "freeze_wake_under_10ms": percentile(frozen, 50) < 10,
                "deep_wake_50mb_under_500ms": percentile(deep, 50) < 500,
            }
        finally:
            computers.close()
            database.dispose()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
