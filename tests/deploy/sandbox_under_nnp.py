"""Start one sandbox of the given backend and use it; run by the tests under no_new_privs.

`python -m tests.deploy.sandbox_under_nnp BACKEND` exits 0 when this process runs under
no_new_privs (which every process it starts inherits and cannot drop: the server's whole
sandbox chain) and the sandbox started, wrote a file in the home, froze, thawed and read it.
gVisor's own /proc does not show the flag, so it is checked here, on the host side.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from tests.computer.sandboxes import UID_BASE, new_user


async def _use(backend: str, folder: Path) -> int:
    database = Database(f"sqlite:///{folder / 'store.db'}")
    upgrade(database)
    settings = ComputerSettings(
        homes_dir=folder / "homes",
        snapshot_dir=folder / "blobs",
        backend=backend,
        network="none",
        memory_bytes=512 * 1024 * 1024,
        pids=128,
        uid_base=UID_BASE,
    )
    computers = Computers(settings, database)
    try:
        user = new_user(database, "owner")
        sandbox = await computers.acquire(user, "turn-1")
        wrote = await sandbox.run("echo ok > f")
        await computers.release("turn-1")  # frozen
        sandbox = await computers.acquire(user, "turn-2")  # thawed
        read = await sandbox.run('test "$(cat f)" = ok')
        await computers.release("turn-2")
        return 0 if wrote.exit_code == 0 and read.exit_code == 0 else 1
    finally:
        computers.close()
        database.dispose()


def main() -> int:
    """Run the check in a temporary folder."""
    if "NoNewPrivs:\t1" not in Path("/proc/self/status").read_text():
        print("not running under no_new_privs", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_use(sys.argv[1], Path(folder)))


if __name__ == "__main__":
    sys.exit(main())
