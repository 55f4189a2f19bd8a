"""A supervised child process that answers model requests as JSON lines (see local_worker).

The server never loads native model code itself: a crash of the child (SIGSEGV in llama.cpp,
SIGKILL by the OOM killer, any exit) fails the calls it was answering with `ModelCrashed`, a
transient error the model step retries, and the next call starts a fresh child. The child
starts at the first call, stops after `idle_s` without calls and with `close()`.

Pipes are served by threads (a writer, a reader of replies, a reader of stderr), so nothing
blocks the event loop and any event loop may call: replies are matched to calls by id, so a
call cancelled mid-way (its turn was preempted) never hands its reply to the next call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import IO, Any

from nightowl.models.base import ModelConfigError, TransientModelError

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0


class ModelCrashed(TransientModelError):
    """The model's process died during the call; worth retrying on a fresh process.

    `cause` says how it died ("signal SIGSEGV", "exit status 3")."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


def cause_of_death(returncode: int) -> str:
    """A process's exit status in words: "signal SIGSEGV", "exit status 3"."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def crash_message(what: str, returncode: int, last_words: str = "") -> str:
    """How a child's death reads to the owner and in the logs (what to do comes first, the
    child's last line of stderr last: messages to the owner may be cut short)."""
    message = (
        f"{what} crashed ({cause_of_death(returncode)}) during this call; it restarts for the "
        "next one. If it keeps crashing, see `nightowl doctor`"
    )
    return message + (f" (it said: {last_words[:80]})" if last_words and returncode > 0 else "")


class _Child:
    """One running process with its pipes, its threads and the calls it owes an answer."""

    def __init__(self, command: Sequence[str]) -> None:
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C at the terminal is for the server, not for it
        )
        self.pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self.outbox: queue.Queue[bytes | None] = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.stopping = False
        self.last_used = time.monotonic()
        self.stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.stderr_reader.start()
        threading.Thread(target=self._write, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        while (line := self.outbox.get()) is not None:
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                return  # the child is gone: the reply reader reports it
        with contextlib.suppress(OSError):
            stdin.close()  # end of input: the child exits

    def _read_stderr(self) -> None:
        stream: IO[bytes] | None = self.process.stderr
        assert stream is not None
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.stderr_tail.append(line)
                log.debug("model process: %s", line, extra={"pid": self.pid})

    def send(self, message: dict[str, Any]) -> None:
        self.outbox.put(json.dumps(message).encode() + b"\n")

    def stop(self) -> int:
        """Close its input, wait a little, then kill it; its exit status."""
        self.stopping = True
        self.outbox.put(None)
        try:
            return self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


class ModelProcess:
    """Runs `command` as a child on demand and sends it requests; see the module docstring."""

    def __init__(self, command: Sequence[str], idle_s: float, what: str = "the model") -> None:
        self.command = list(command)
        self.idle_s = idle_s
        self.what = what
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._next_id = 0
        self._idle_timer: threading.Timer | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running child's process id, or None while none runs."""
        child = self._child
        return child.pid if child is not None else None

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the child's reply line (without its id)."""
        child, request_id, future = await asyncio.to_thread(self._submit, request)
        try:
            reply = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # Tell the child to stop working on it; its late reply finds no taker.
            with self._lock:
                child.pending.pop(request_id, None)
            child.send({"cancel": request_id})
            raise
        finally:
            self._arm_idle_timer(child)
        return reply

    def _submit(
        self, request: dict[str, Any]
    ) -> tuple[_Child, int, concurrent.futures.Future[dict[str, Any]]]:
        """Register the call with a running child (starting one if needed) and send it."""
        with self._lock:
            if self._closed:
                raise TransientModelError(f"{self.what} is shutting down with the server")
            child = self._child
            if child is None or child.process.poll() is not None:
                child = self._start()
            self._next_id += 1
            request_id = self._next_id
            future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
            child.pending[request_id] = future
            child.last_used = time.monotonic()
        child.send({"id": request_id, **request})
        return child, request_id, future

    def _start(self) -> _Child:
        """A fresh child and its reply reader (the lock is held)."""
        try:
            child = _Child(self.command)
        except OSError as error:
            raise ModelConfigError(
                f"cannot start {self.what}'s process ({' '.join(self.command)}): {error}"
            ) from error
        self._child = child
        threading.Thread(target=self._read_replies, args=(child,), daemon=True).start()
        log.info("model process started", extra={"pid": child.pid})
        return child

    def _read_replies(self, child: _Child) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                message = json.loads(raw)
                request_id = message.pop("id")
            except (ValueError, KeyError, AttributeError):
                log.warning("model process wrote a line outside the protocol; ignored")
                continue
            with self._lock:
                future = child.pending.pop(request_id, None)
            if future is not None:
                _settle(future, result=message)
        self._buried(child)

    def _buried(self, child: _Child) -> None:
        """The child's output ended: it died or was stopped. Fail whatever it owed."""
        try:
            returncode = child.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # closed its output yet lives on: not usable
            child.process.kill()
            returncode = child.process.wait()
        child.stderr_reader.join(timeout=1.0)
        with self._lock:
            if self._child is child:
                self._child = None
            owed, child.pending = child.pending, {}
        if child.stopping:
            error: TransientModelError = TransientModelError(
                f"{self.what} was stopped (the server is shutting down)"
            )
            log.info("model process stopped", extra={"pid": child.pid, "status": returncode})
        else:
            last_words = child.stderr_tail[-1] if child.stderr_tail else ""
            error = ModelCrashed(
                crash_message(self.what, returncode, last_words), cause_of_death(returncode)
            )
            log.warning(
                "model process crashed: %s",
                str(error),
                extra={
                    "pid": child.pid,
                    "status": returncode,
                    "stderr": " | ".join(child.stderr_tail),
                },
            )
        for future in owed.values():
            _settle(future, error=error)

    def _arm_idle_timer(self, child: _Child) -> None:
        with self._lock:
            child.last_used = time.monotonic()
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            if self._closed:
                return
            self._idle_timer = threading.Timer(self.idle_s, self._stop_if_idle)
            self._idle_timer.daemon = True
            self._idle_timer.start()

    def _stop_if_idle(self) -> None:
        with self._lock:
            child = self._child
            if child is None or child.pending:
                return
            if time.monotonic() - child.last_used < self.idle_s * 0.99:
                return  # used since the timer was armed; a newer timer is on its way
            self._child = None
            child.stopping = True
        log.info("model process idle; stopping it", extra={"pid": child.pid})
        child.stop()

    def close(self) -> None:
        """Stop the child (blocking, up to a few seconds); calls still waiting fail."""
        with self._lock:
            self._closed = True
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            child, self._child = self._child, None
        if child is not None:
            child.stop()


def _settle(
    future: concurrent.futures.Future[dict[str, Any]],
    *,
    result: dict[str, Any] | None = None,
    error: BaseException | None = None,
) -> None:
    """Resolve `future` unless its caller gave up on it already (cancelled)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or {})
    except concurrent.futures.InvalidStateError:
        pass
