"""`nightowl chat`: the terminal chat client against a real server."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from nightowl.channels.terminal import render
from tests.server import NIGHTOWL, ServerProcess, say, write_script


def _reader(process: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _expect(lines: queue.Queue[str], fragment: str, timeout: float = 30) -> list[str]:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.append(line)
        if fragment in line:
            return seen
    raise AssertionError(f"{fragment!r} never appeared; saw {seen}")


def _start_chat(server: ServerProcess) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [NIGHTOWL, "chat", "--url", server.url, "--token", server.token],
        env=server.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_chat_sends_shows_replies_and_catches_up_after_a_server_restart(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        [say("pong", final=True)],
        then="repeat_last",
    )
    server = ServerProcess(tmp_path / "data", model=model).start()
    chat = _start_chat(server)
    try:
        lines = _reader(chat)
        header = _expect(lines, "conversation conv_")[-1]
        conversation = header.split()[1]
        assert chat.stdin is not None
        chat.stdin.write("ping\n")
        chat.stdin.flush()
        _expect(lines, "[1] you: ping")
        _expect(lines, "[2] nightowl: pong")

        server.kill()
        server.start()
        # Written while the chat was disconnected: it must show up without any action.
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}
        ) as c:
            c.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "web-1", "text": "from the phone"},
            )
        _expect(lines, "[3] you: from the phone", timeout=40)
        _expect(lines, "[4] nightowl: pong")
    finally:
        chat.kill()
        server.stop()


@pytest.mark.slow
def test_chat_shows_choices_and_answers_them_with_a_command(tmp_path: Path) -> None:
    ask = say(
        "Pay the Acme invoice?",
        buttons=[{"label": "Pay", "value": "pay"}, {"label": "Not now", "value": "no"}],
        ask="approval",
    )
    model = write_script(tmp_path / "script.json", [ask, say("Paid.", final=True)])
    server = ServerProcess(tmp_path / "data", model=model).start()
    chat = _start_chat(server)
    try:
        lines = _reader(chat)
        _expect(lines, "conversation conv_")
        assert chat.stdin is not None
        chat.stdin.write("deal with the invoice\n")
        chat.stdin.flush()
        seen = _expect(lines, "(answer with /answer 2 N)")
        assert "[2] nightowl: Pay the Acme invoice?" in seen
        assert "    [1] Pay  [2] Not now" in seen
        chat.stdin.write("/answer 2 7\n/answer 2 1\n")
        chat.stdin.flush()
        seen = _expect(lines, "[4] nightowl: Paid.")
        assert "(not sent: pick a choice by its number, 1 to 2: /answer 2 1)" in seen
        assert "[3] you: Pay" in seen
    finally:
        chat.kill()
        server.stop()


def test_chat_renders_files_drafts_and_outside_text_as_text() -> None:
    message = {
        "seq": 7,
        "role": "agent",
        "trust": "agent",
        "body": "Reply to Sam:",
        "important": True,
        "files": [{"name": "a.png", "size": 10, "url": "/v1/conversations/c/messages/m/files/0"}],
        "controls": {"state": "open", "draft": "Hi Sam,\nTuesday works.", "buttons": []},
    }
    assert render(message, "http://h:1").splitlines() == [
        "[7] nightowl: (!) Reply to Sam:",
        "    file: a.png (10 bytes) http://h:1/v1/conversations/c/messages/m/files/0",
        "    | Hi Sam,",
        "    | Tuesday works.",
        "    (/send 7 to send it, /send 7 <new text> to change it, /discard 7)",
    ]
    outside = {"seq": 8, "role": "user", "trust": "untrusted", "body": "<b>hi</b>"}
    assert render(outside) == "[8] them (untrusted): <b>hi</b>"


def test_chat_with_no_server_says_so_without_a_traceback(tmp_path: Path) -> None:
    from tests.server import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = subprocess.run(
        [NIGHTOWL, "chat", "--url", url, "--token", "t" * 32],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NIGHTOWL_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert f"nightowl chat: cannot reach the server at {url}" in done.stderr
    assert "nightowl serve" in done.stderr and "Traceback" not in done.stderr
