"""The `nightowl` command line: tokens, doctor, and the terminal chat client."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from nightowl.channels.terminal import render
from tests.server import NIGHTOWL, ServerProcess, say, write_script


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NIGHTOWL, *args], env=env, capture_output=True, text=True, timeout=120)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "NIGHTOWL_DATA_DIR": str(tmp_path / "data"), **extra}


def test_token_create_list_revoke(tmp_path: Path) -> None:
    env = _env(tmp_path)
    created = _run("token", "create", "--name", "phone", env=env)
    assert created.returncode == 0, created.stderr
    token_id, secret = created.stdout.split()[2], created.stdout.split(": ", 1)[1].split()[0]
    assert secret.startswith("nwl_")
    listed = _run("token", "list", env=env)
    assert token_id in listed.stdout and "phone" in listed.stdout and "active" in listed.stdout
    assert secret not in listed.stdout  # secrets are never printed again
    revoked = _run("token", "revoke", token_id, env=env)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert "revoked" in _run("token", "list", env=env).stdout
    unknown = _run("token", "revoke", "tok_missing", env=env)
    assert unknown.returncode == 2 and "token list" in unknown.stderr
    no_user = _run("token", "create", "--user", "nobody", env=env)
    assert no_user.returncode == 2 and "no user named" in no_user.stderr


def test_doctor_reports_each_check_and_what_to_do(tmp_path: Path) -> None:
    fresh = _run("doctor", env=_env(tmp_path))
    assert fresh.returncode == 1 and "[FAIL] migrations" in fresh.stdout
    assert "nightowl serve" in fresh.stdout  # says what to do
    _run("token", "list", env=_env(tmp_path))  # any store command migrates it
    healthy = _run("doctor", env=_env(tmp_path))
    assert healthy.returncode == 0, healthy.stdout
    for name in ("database", "migrations", "engine", "model", "sandbox", "backend bubblewrap"):
        assert f"] {name}:" in healthy.stdout
    for name in (
        "backend gvisor",
        "cgroups",
        "egress",
        "desktop",
        "browser",
        "memory search",
        "channels",
    ):
        assert f"] {name}:" in healthy.stdout
    broken = _run(
        "doctor",
        env=_env(
            tmp_path,
            NIGHTOWL_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/nw_does_not_exist",
            NIGHTOWL_MODEL="scripted:/nonexistent.json",
        ),
    )
    assert broken.returncode == 1
    assert "[FAIL] database" in broken.stdout and "fix:" in broken.stdout
    assert "[FAIL] model" in broken.stdout


STANDIN = Path(__file__).parent / "models" / "standin_worker.py"


def test_doctor_model_reports_a_crashing_local_model_plainly(tmp_path: Path) -> None:
    """`nightowl doctor --model` (what `make run` runs first) has the local model answer a
    short generation in a process of its own: a crash there is named, with what to do."""
    crashing = _run(
        "doctor",
        "--model",
        env=_env(
            tmp_path,
            NIGHTOWL_MODEL="local",
            NIGHTOWL_LOCAL_MODEL_COMMAND=f"{sys.executable} {STANDIN} --crash SIGSEGV",
        ),
    )
    assert crashing.returncode == 1
    assert "[FAIL] model: the local model crashed (signal SIGSEGV)" in crashing.stdout
    assert "make clean run" in crashing.stdout  # what to do
    assert "database" not in crashing.stdout  # only the model's check
    answering = _run(
        "doctor",
        "--model",
        env=_env(
            tmp_path,
            NIGHTOWL_MODEL="local",
            NIGHTOWL_LOCAL_MODEL_COMMAND=f"{sys.executable} {STANDIN}",
        ),
    )
    assert answering.returncode == 0, answering.stdout
    assert "[ok  ] model: local model answered in its own process" in answering.stdout


@pytest.mark.slow
def test_doctor_model_runs_a_short_generation_of_the_real_local_model(tmp_path: Path) -> None:
    result = _run("doctor", "--model", env=_env(tmp_path, NIGHTOWL_MODEL="local"))
    assert result.returncode == 0, result.stdout
    assert "local model answered in its own process" in result.stdout


def test_bad_configuration_is_refused_with_the_variable_named(tmp_path: Path) -> None:
    result = _run("doctor", env=_env(tmp_path, NIGHTOWL_MODEL="gpt:whatever"))
    assert result.returncode != 0
    assert "NIGHTOWL_MODEL" in result.stderr and "unknown model kind" in result.stderr
    lapsing = _run(
        "doctor",
        env=_env(
            tmp_path,
            NIGHTOWL_CHANNEL_RELOAD_S="10",
            NIGHTOWL_CHANNEL_LISTENER_LEASE_S="15",
        ),
    )
    assert lapsing.returncode != 0
    assert "NIGHTOWL_CHANNEL_LISTENER_LEASE_S (15) must be at least twice" in lapsing.stderr


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
