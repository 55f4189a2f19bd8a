"""The browser through a computer host against the browser in this process: how long it takes
to start (the first call: Chromium launched in the sandbox, Playwright attached) and what one
page call costs after (the page's text read, `page.inner_text`), p50 of each.

Prints JSON. The host runs on 127.0.0.1: the numbers are the tier's own cost, not a network's.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402
from bench.computer_tier import near_and_far  # noqa: E402

from nightowl.computer.browser import Browsers, BrowserSession  # noqa: E402
from nightowl.computer.computers import Computers  # noqa: E402
from nightowl.computer.remote import RemoteComputers  # noqa: E402

UID_BASE = 3_660_000
PAGE = "data:text/html,<title>bench</title><p>a page to read</p>"


async def _text(session: BrowserSession) -> str:
    page = session.current_page()
    if page.url != PAGE:
        await page.goto(PAGE)
    return await page.locator("body").inner_text()


async def _browser_calls(
    computers: Computers | RemoteComputers, browsers: Browsers, user: str, starts: int, reads: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per browser start (closed after each) and per page read."""
    started_ms, read_ms = [], []
    sandbox = await computers.acquire(user, "bench-turn")
    for n in range(starts + 1):
        began = perf_counter()
        assert "a page to read" in await browsers.use(user, sandbox, _text)
        if n:  # the first also boots what the others reuse (Playwright's driver)
            started_ms.append((perf_counter() - began) * 1000)
        await browsers.close_user(user)
    await browsers.use(user, sandbox, _text)
    for _ in range(reads):
        began = perf_counter()
        await browsers.use(user, sandbox, _text)
        read_ms.append((perf_counter() - began) * 1000)
    await browsers.close()
    await computers.release("bench-turn")
    return started_ms, read_ms


def browser_through_a_host(starts: int = 5, reads: int = 50) -> dict[str, float]:
    """Start and read p50s, in process and through a host."""
    with near_and_far("nightowl-tier-browser-", UID_BASE) as pair:
        here = asyncio.run(
            _browser_calls(pair.local, Browsers(pair.local), pair.near, starts, reads)
        )
        there = asyncio.run(
            _browser_calls(pair.tier, Browsers(pair.local), pair.far, starts, reads)
        )
    return {
        "in_process_start_p50_ms": round(percentile(here[0], 50), 1),
        "remote_start_p50_ms": round(percentile(there[0], 50), 1),
        "in_process_read_p50_ms": round(percentile(here[1], 50), 2),
        "remote_read_p50_ms": round(percentile(there[1], 50), 2),
    }


if __name__ == "__main__":
    print(json.dumps(browser_through_a_host(), indent=2))
