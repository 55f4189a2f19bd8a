"""capture(): a short program's output from inside a sandbox (real bubblewrap)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nightowl.computer.capture import capture
from tests.computer.sandboxes import computers_for, new_user


def test_a_program_printing_more_than_a_pipe_holds_ends_at_once_with_the_start_kept(
    tmp_path: Path,
) -> None:
    """The pipe is read while the program runs: one printing 400 KB (more than a pipe holds;
    `xdpyinfo` prints ~100 KB) ends as soon as it is done, not when its time runs out."""

    async def scenario() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "someone")
            sandbox = await computers.acquire(user, "turn")
            started = time.monotonic()
            big = await capture(
                sandbox, ["/bin/sh", "-c", "yes abcdefghi | head -c 400000"], timeout_s=20
            )
            took = time.monotonic() - started
            assert big.exit_code == 0, big  # not None: it did not run out of time
            assert took < 15, took
            assert big.output == ("abcdefghi\n" * 820)[:8192].strip()
            small = await capture(sandbox, ["/bin/sh", "-c", "echo hi; echo there >&2; exit 3"])
            assert (small.exit_code, small.output) == (3, "hi\nthere")

    asyncio.run(scenario())
