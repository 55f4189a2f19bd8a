"""The local model's process, supervised: a crash fails one call (retryably), the next call
gets a fresh process, an idle process stops, a cancelled call never takes the next one's reply.

The child is a scripted stand-in (tests/models/standin_worker.py) speaking the worker's
protocol; the real worker's own test is in test_local_model.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nightowl.messages import Entry, ModelRequest
from nightowl.models.base import ModelConfigError, TransientModelError, is_transient
from nightowl.models.local import LocalModel
from nightowl.models.local_worker import Inbox, serve
from tests.server import wait_for

STANDIN = Path(__file__).with_name("standin_worker.py")


def _model(tmp_path: Path, idle_s: float = 300.0) -> LocalModel:
    command = [sys.executable, str(STANDIN), "--pids", str(tmp_path / "pids")]
    return LocalModel(idle_s=idle_s, command=command)


def _started(tmp_path: Path) -> list[int]:
    """The pids of every stand-in process started so far, in order."""
    path = tmp_path / "pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def _ask(text: str, purpose: str = "compaction") -> ModelRequest:
    """A one-message request; `compaction` asks for plain text (no tool-call primer)."""
    return ModelRequest(
        system="You are a test.",
        tools=(),
        messages=(Entry(kind="user", text=text),),
        max_output_tokens=16,
        purpose=purpose,
    )


@pytest.mark.parametrize("how", ["segv", "sigkill"])
def test_a_crash_mid_call_fails_that_call_retryably_and_the_next_gets_a_fresh_process(
    tmp_path: Path, how: str
) -> None:
    model = _model(tmp_path)

    async def scenario() -> tuple[str, BaseException, str]:
        first = await model.complete(_ask("hello"))
        try:
            await model.complete(_ask(f"please [{how}]"))
        except Exception as error:
            crash: BaseException = error
        else:
            raise AssertionError("the crashed call returned a reply")
        after = await model.complete(_ask("again"))
        return first.text, crash, after.text

    try:
        first, crash, after = asyncio.run(scenario())
    finally:
        model.close()
    assert first == "echo: hello"
    assert isinstance(crash, TransientModelError) and is_transient(crash)
    name = "SIGSEGV" if how == "segv" else "SIGKILL"
    assert f"the local model crashed (signal {name})" in str(crash)
    assert "nightowl doctor" in str(crash)
    assert after == "echo: again"  # answered, by a fresh process
    pids = _started(tmp_path)
    assert len(pids) == 2 and pids[0] != pids[1] and not _alive(pids[0])


def test_a_worker_that_exits_says_how_and_what_it_said(tmp_path: Path) -> None:
    model = _model(tmp_path)
    try:
        with pytest.raises(TransientModelError) as crash:
            asyncio.run(model.complete(_ask("[exit]")))
    finally:
        model.close()
    assert "crashed (exit status 3)" in str(crash.value)
    assert "cannot go on" in str(crash.value)


def test_calls_waiting_behind_a_crash_fail_too_and_are_answered_after(tmp_path: Path) -> None:
    """Calls queued on the process that died are failed (for their step to retry), not lost."""
    model = _model(tmp_path)

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            model.complete(_ask("[slow] [segv]")),
            model.complete(_ask("queued behind it")),
            return_exceptions=True,
        )

    try:
        outcomes = asyncio.run(scenario())
        retried = asyncio.run(model.complete(_ask("queued behind it")))
    finally:
        model.close()
    assert all(isinstance(o, TransientModelError) for o in outcomes), outcomes
    assert retried.text == "echo: queued behind it"


def test_a_cancelled_call_never_hands_its_reply_to_the_next_call(tmp_path: Path) -> None:
    """The owner preempts a turn mid-call: the stand-in still answers the cancelled request
    (a second later), and the calls after it each get their own reply, from the same
    process (its cache is kept)."""
    model = _model(tmp_path)

    async def scenario() -> tuple[bool, str, str]:
        slow = asyncio.create_task(model.complete(_ask("[slow] first")))
        await asyncio.sleep(0.2)
        slow.cancel()
        try:
            await slow
            cancelled = False
        except asyncio.CancelledError:
            cancelled = True
        second = await model.complete(_ask("second"))
        third = await model.complete(_ask("third"))
        return cancelled, second.text, third.text

    try:
        cancelled, second, third = asyncio.run(scenario())
    finally:
        model.close()
    assert cancelled
    assert (second, third) == ("echo: second", "echo: third")
    assert len(_started(tmp_path)) == 1


def test_an_idle_process_stops_and_the_next_call_starts_another(tmp_path: Path) -> None:
    model = _model(tmp_path, idle_s=0.3)
    try:
        assert model.process.pid is None  # nothing runs before the first call
        asyncio.run(model.complete(_ask("one")))
        first = _started(tmp_path)[0]
        wait_for(lambda: not _alive(first), timeout=30)
        assert model.process.pid is None
        reply = asyncio.run(model.complete(_ask("two")))
        assert reply.text == "echo: two"
        assert len(_started(tmp_path)) == 2
    finally:
        model.close()
    assert not _alive(_started(tmp_path)[1])  # closing stops it


def test_a_command_that_cannot_start_is_a_configuration_error(tmp_path: Path) -> None:
    model = LocalModel(command=[str(tmp_path / "no-such-worker")])
    with pytest.raises(ModelConfigError, match="cannot start the local model"):
        asyncio.run(model.complete(_ask("hello")))


class _EndlessSlots:
    """Generates until told to stop, as llama.cpp would for a very long reply."""

    def complete(
        self,
        slot: str,
        prompt: str,
        max_tokens: int,
        stop_now: Any,
        prefix_chars: int = 0,
        call_schema: Any = None,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while not stop_now() and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped = stop_now()
        return {
            "text": "stopped" if stopped else "ran to the end",
            "prompt_tokens": 1,
            "cached_tokens": 0,
            "output_tokens": 1,
        }


def test_the_worker_stops_a_generation_when_its_call_is_cancelled() -> None:
    """The real worker's loop: a cancel line reaches the generation in progress, which stops
    and answers `cancelled`; the next request is answered as usual."""
    read_end, write_end = os.pipe()
    out = io.StringIO()
    ended = threading.Event()
    inbox = Inbox(os.fdopen(read_end, "rb"), on_end=ended.set)
    worker = threading.Thread(target=serve, args=(_EndlessSlots(), inbox, out), daemon=True)
    worker.start()
    requests = os.fdopen(write_end, "wb", buffering=0)
    requests.write(b'{"id": 1, "slot": "main", "prompt": "p", "max_tokens": 9}\n')
    time.sleep(0.1)
    requests.write(b'{"cancel": 1}\n')
    wait_for(lambda: out.getvalue().count("\n") >= 1, timeout=30)
    first = json.loads(out.getvalue().splitlines()[0])
    assert first == {"id": 1, "error": "cancelled", "message": "cancelled while it ran"}
    requests.close()
    wait_for(ended.is_set, timeout=10)


def test_the_worker_keeps_stdout_for_its_replies(tmp_path: Path) -> None:
    """What Python or native code prints in the worker goes to stderr, never into the
    protocol: the real worker, without weights, answers a configuration error in one line."""
    noisy = (
        "import os, sys\n"
        "from nightowl.models import local_worker as w\n"
        "class Noisy(w.Slots):\n"
        "    def complete(self, *args):\n"
        "        print('python noise')\n"
        "        os.write(1, b'native noise\\n')\n"
        "        return super().complete(*args)\n"
        "w.Slots = Noisy\n"
        "w.main(sys.argv[1:])\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", noisy, "--weights", str(tmp_path / "missing.gguf")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write('{"id": 4, "slot": "main", "prompt": "hi", "max_tokens": 4}\n')
    worker.stdin.flush()
    reply = json.loads(worker.stdout.readline())
    worker.stdin.close()  # end of input ends the worker
    assert worker.wait(timeout=60) == 0
    assert worker.stderr is not None
    rest, errors = worker.stdout.read(), worker.stderr.read()
    assert reply["id"] == 4 and reply["error"] == "config"
    assert "models install" in reply["message"]
    assert rest == ""  # nothing else reached the protocol
    assert "python noise" in errors and "native noise" in errors


def test_signal_names_read_plainly() -> None:
    from nightowl.models.model_process import crash_message

    assert crash_message("the local model", -signal.SIGSEGV).startswith(
        "the local model crashed (signal SIGSEGV)"
    )
