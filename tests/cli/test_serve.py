"""`nightowl serve`'s console: at a terminal, short readable lines and the sign-in link on a line
of its own, with one line for the migrations; into a pipe, JSON lines (what the other tests and
log collectors read)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

from nightowl.store import migrate
from tests.server import NIGHTOWL, ServerProcess

_VERSIONS = Path(migrate.__file__).parent / "migrations" / "versions"
# The one line a new store's migration leaves: every migration file is a step.
_MIGRATED = (
    f"migrated the database: {len(list(_VERSIONS.glob('[0-9]*_*.py')))} steps, "
    f"now at {migrate.newest_revision()}"
)
# Alembic's own lines, one per migration step and plugin: none may reach the console.
ALEMBIC_CHATTER = ("Running upgrade", "Context impl", "Will assume", "setup plugin")


def _serve_at_a_terminal(server: ServerProcess, until: str, timeout: float = 120) -> list[str]:
    """Run `nightowl serve` with a pseudo-terminal as its stdout and stderr until a line holds
    `until`, stop it, and return the lines it printed."""
    primary, secondary = pty.openpty()
    env = {**server.env, "NIGHTOWL_LOG_FORMAT": "auto"}
    process = subprocess.Popen(
        [NIGHTOWL, "serve"], env=env, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    screen = b""
    try:
        deadline = time.monotonic() + timeout
        while until.encode() not in screen:
            assert time.monotonic() < deadline, f"{until!r} never appeared:\n{screen.decode()}"
            assert process.poll() is None, f"serve exited early:\n{screen.decode()}"
            if select.select([primary], [], [], 0.5)[0]:
                screen += os.read(primary, 65536)
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(primary)
    return screen.decode().replace("\r\n", "\n").splitlines()


def test_serve_at_a_terminal_prints_readable_lines_and_the_sign_in_link(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data")
    first = _serve_at_a_terminal(server, "Application startup complete")
    assert not [line for line in first if line.lstrip().startswith("{")], first  # no JSON
    assert not [line for line in first if any(c in line for c in ALEMBIC_CHATTER)], first
    migrated = [line for line in first if "migrated the database" in line]
    assert len(migrated) == 1, first
    assert migrated[0].endswith(_MIGRATED), first
    assert not [line for line in first if " INFO " in line or " info " in line], first
    # The link stands out: announced, and on a line of its own between blank lines.
    link = f"{server.url}/#token={server.token}"
    at = first.index("  Open this link to sign in:")
    assert first[at + 1 : at + 4] == ["", f"    {link}", ""], first

    again = _serve_at_a_terminal(server, "Application startup complete")
    assert not [line for line in again if "migrated" in line or server.token in line], again
    assert "  `nightowl token` shows the owner's sign-in link" in again


def test_serve_into_a_pipe_logs_json_lines_and_one_line_for_the_migrations(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "data", env={"NIGHTOWL_LOG_FORMAT": "auto"}).start()
    try:
        lines = server.log_lines()
    finally:
        server.stop()
    assert [line["message"] for line in lines if line["logger"].startswith("alembic")] == []
    migrated = [line for line in lines if line["logger"] == "nightowl.store.migrate"]
    assert [line["message"] for line in migrated] == [_MIGRATED]
