"""The shell and file tools against a real sandbox: what the agent sees, and how they fail."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nightowl.computer.computers import Computers
from nightowl.tools.files import FILE_TOOLS
from nightowl.tools.registry import ToolContext, ToolRegistry, ToolResult
from nightowl.tools.shell import SHELL
from tests.computer.sandboxes import computers_for, new_user

Call = Callable[..., Awaitable[ToolResult]]


def _run(tmp_path: Path, scenario: Callable[[Call, Computers, str], Awaitable[None]]) -> None:
    registry = ToolRegistry([SHELL, *FILE_TOOLS])

    async def main() -> None:
        with computers_for(tmp_path) as computers:
            user = new_user(computers.database, "gil")
            ctx = ToolContext(
                database=computers.database,
                blob_dir=tmp_path / "blobs",
                conversation_id="c",
                owner_id=user,
                turn_id="t1",
                call_id="0.0",
                home=computers.home(user),
                computers=computers,
            )

            async def call(name: str, **arguments: Any) -> ToolResult:
                parsed = registry.parse_arguments(name, arguments)
                if isinstance(parsed, ToolResult):
                    return parsed
                tool = registry.get(name)
                assert tool is not None
                return await tool.run(parsed, ctx)

            await scenario(call, computers, user)

    asyncio.run(main())


def test_shell_shows_the_exit_code_and_keeps_long_output_as_a_file(tmp_path: Path) -> None:
    async def scenario(call: Call, computers: Computers, user: str) -> None:
        done = await call("shell", command="echo hello; echo oops >&2; exit 3")
        assert done.is_error and re.search(r"\n\(exit code 3 after \d+\.\d s\)$", done.content)
        assert done.content.startswith("hello\noops\n")  # the output first
        quiet = await call("shell", command="true")
        assert not quiet.is_error
        assert re.fullmatch(r"\(no output; exit code 0 after \d+\.\d s\)", quiet.content)

        long = await call("shell", command="seq 1 20000")
        assert not long.is_error and "bytes left out" in long.content
        assert long.content.splitlines()[0] == "1" and "20000" in long.content
        where = long.content.rsplit("full output: ~/", 1)[1].split(",")[0]
        full = (computers.home(user) / where).read_text().splitlines()
        assert len(full) == 20000

        found = await call("search_files", pattern="^1999[0-9]$", path=where)
        assert found.content.startswith("10 matches")

    _run(tmp_path, scenario)


def test_shell_timeouts_background_jobs_and_bad_input(tmp_path: Path) -> None:
    async def scenario(call: Call, computers: Computers, user: str) -> None:
        slow = await call("shell", command="echo begun; sleep 30", timeout_s=0.5)
        assert slow.is_error and "Timed out after 0.5 s" in slow.content and "begun" in slow.content

        started = await call(
            "shell",
            command="while true; do date +%s >> ticks.txt; sleep 0.1; done",
            background=True,
        )
        assert "Started in the background" in started.content
        ticks = computers.home(user) / "ticks.txt"

        def ticked() -> int:
            return len(ticks.read_text().splitlines()) if ticks.exists() else 0

        # It keeps running after the call returned (a loaded machine may start it late).
        deadline = asyncio.get_running_loop().time() + 20
        while ticked() < 2:
            assert asyncio.get_running_loop().time() < deadline, ticked()
            await asyncio.sleep(0.1)

        nowhere = await call("shell", command="pwd", cwd="no/such/folder")
        assert nowhere.is_error and "could not run" in nowhere.content

        empty = await call("shell", command="")
        assert empty.is_error and "command" in empty.content

    _run(tmp_path, scenario)


def test_file_tools_read_write_list_search_and_explain_failures(tmp_path: Path) -> None:
    async def scenario(call: Call, computers: Computers, user: str) -> None:
        wrote = await call("write_file", path="notes/todo.md", content="- milk\n- bread\n")
        assert wrote.content == "Wrote 15 bytes to /home/agent/notes/todo.md."
        await call("write_file", path="notes/todo.md", content="- eggs\n", append=True)
        read = await call("read_file", path="notes/todo.md", offset=2, limit=1)
        assert read.content == "notes/todo.md: lines 2-2 of 3. Next: offset=3.\n     2\t- bread"

        listed = await call("list_files", path="~", depth=2)
        assert "/home/agent/notes/" in listed.content
        assert "/home/agent/notes/todo.md  (22 bytes)" in listed.content

        found = await call("search_files", pattern="egg|milk", glob="*.md")
        assert found.content.splitlines()[0] == "2 matches:"

        missing = await call("read_file", path="nope.txt")
        assert missing.is_error and "list_files shows what is there" in missing.content
        assert "of that name" not in missing.content  # none anywhere
        # A guessed folder: the one file of that name in the home is read, and said so.
        guessed = await call("read_file", path="~/helpers/hlp_1/scratch/todo.md")
        assert not guessed.is_error
        assert guessed.content.startswith(
            "(There is no ~/helpers/hlp_1/scratch/todo.md; this is /home/agent/notes/todo.md, "
            "the one file of that name in your home.)\n/home/agent/notes/todo.md: lines 1-3 of 3"
        )
        assert "- eggs" in guessed.content
        # Two of that name: both are named, none is read.
        await call("write_file", path="old/todo.md", content="- old\n")
        ambiguous = await call("read_file", path="todo.md")
        assert ambiguous.is_error and "- eggs" not in ambiguous.content
        assert ambiguous.content.endswith(
            "Files of that name are at: /home/agent/notes/todo.md, /home/agent/old/todo.md."
        )
        folder = await call("read_file", path="notes")
        assert folder.is_error and "That is a folder" in folder.content
        outside = await call("write_file", path="/etc/evil.conf", content="x")
        assert outside.is_error and "only your home folder and /tmp are writable" in outside.content
        bad = await call("search_files", pattern="(unclosed")
        assert bad.is_error and "not a valid regular expression" in bad.content

        # A link out of the home leads only where the sandbox itself may go.
        await call("shell", command="ln -s /etc/shadow shadow")
        leaked = await call("read_file", path="shadow")
        assert leaked.is_error and "Permission denied" in leaked.content

    _run(tmp_path, scenario)
