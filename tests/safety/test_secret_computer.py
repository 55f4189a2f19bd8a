"""In a real sandbox: the shell's full output file and the home's snapshot never hold a
secret's value, in any common form, however the command ends (exit, timeout, background)."""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
from pathlib import Path
from typing import Any

import zstandard

from nightowl.computer.snapshots import snapshot_path
from nightowl.store.computers import computer_of
from nightowl.tools.registry import ToolContext, ToolRegistry, ToolResult
from nightowl.tools.secret_scope import SecretScope
from nightowl.tools.shell import SHELL
from tests.computer.sandboxes import UID_BASE, computers_for, new_user
from tests.server import wait_for

TOKEN = "tok-9f8e7d6c5b4a-canary"
FORMS = [
    TOKEN,
    base64.b64encode(f"user:{TOKEN}".encode()).decode()[8:],
    base64.b64encode(f":{TOKEN}".encode()).decode()[4:],
    TOKEN.encode().hex(),
]
ECHO = (
    "printf '%s\\n' '{{secret:TOKEN}}'; printf 'user:%s' '{{secret:TOKEN}}' | base64; "
    "printf ':%s' '{{secret:TOKEN}}' | base64; printf %s '{{secret:TOKEN}}' | od -An -tx1 | "
    "tr -d ' \\n'; echo"
)


def _holds_secret(data: bytes) -> bool:
    return any(form.encode() in data for form in FORMS)


def test_the_shell_output_file_and_the_home_snapshot_hold_no_secret(tmp_path: Path) -> None:
    scope = SecretScope({"TOKEN": TOKEN})
    registry = ToolRegistry([SHELL])

    async def main() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "gil")
            computers.redactor_for = lambda _user: scope.redactor
            home = computers.home(user)
            ctx = ToolContext(
                database=computers.database,
                blob_dir=tmp_path / "blobs",
                conversation_id="c",
                owner_id=user,
                turn_id="t1",
                call_id="0.0",
                home=home,
                computers=computers,
                redaction=scope.redactor.spec(),
            )

            async def shell(call_id: str, **arguments: Any) -> ToolResult:
                parsed = scope.parse(registry, "shell", "write", arguments)
                assert not isinstance(parsed, ToolResult)
                return await SHELL.run(parsed, ToolContext(**{**vars(ctx), "call_id": call_id}))

            done = await shell("1", command=f"{ECHO}; exit 4")
            assert done.is_error and "(exit code 4 after" in done.content
            assert done.content.count("[secret:TOKEN]") == 4 and not _holds_secret(
                done.content.encode()
            )
            long = await shell("2", command=f"{ECHO}; seq 1 5000; {ECHO}")
            assert "bytes left out" in long.content
            killed = await shell("3", command=f"{ECHO}; seq 1 3000; sleep 30", timeout_s=2)
            assert killed.is_error and "Timed out" in killed.content
            started = await shell("4", command=f"{ECHO}; sleep 30", background=True)
            assert "Started in the background" in started.content
            # A file the agent wrote with the secret in it (this computer has no network).
            await shell("5", command="printf 'TOKEN=%s\\n' '{{secret:TOKEN}}' > .env")
            assert (home / ".env").read_bytes() == f"TOKEN={TOKEN}\n".encode()

            background = home / ".nightowl" / "outputs" / "t1-4.log"
            # The background job's lines show while it still runs (it sleeps 30 s).
            wait_for(
                lambda: background.exists() and background.read_text().count("[secret:TOKEN]") == 4
            )
            outputs = sorted((home / ".nightowl" / "outputs").iterdir())
            assert len(outputs) == 5
            for output in outputs:
                assert not _holds_secret(output.read_bytes()), output.name
            whole = (home / ".nightowl" / "outputs" / "t1-2.log").read_text()
            assert whole.count("[secret:TOKEN]") == 8 and "\n5000\n" in whole

            await computers.release("t1")
            assert await computers.deep_sleep(user)
            with computers.database.read() as session:
                reference = computer_of(session, user, UID_BASE).snapshot
            assert reference is not None
            packed = snapshot_path(tmp_path / "blobs", reference).read_bytes()
            plain = zstandard.ZstdDecompressor().decompressobj().decompress(packed)
            assert not _holds_secret(plain)
            with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
                names = tar.getnames()
            assert ".env" in names and ".nightowl/outputs/t1-1.log" in names

            woken = await shell("6", command="cat .env")  # restored from the snapshot
            assert woken.content.startswith("TOKEN=[secret:TOKEN]\n(exit code 0 after")

    asyncio.run(main())
