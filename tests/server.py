"""Run the real `nightowl serve` as a process, for end-to-end and crash tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

NIGHTOWL = str(Path(sys.executable).parent / "nightowl")
# One TLS context for every HTTP client the tests make: a new httpx client otherwise loads the
# CA bundle again, 15-30 ms of CPU each (measured), and the suite makes one per poll.
TLS = ssl.create_default_context()


# Each test process hands out ports from a range of its own, below the kernel's ephemeral range
# (32768 and up), so two test processes never pick the same port, and no client socket takes
# one between the pick and the server's bind. (Asking the kernel for port 0 does not promise
# that: another process's server once bound the port first and answered this one's /healthz.)
_WORKER = int("".join(ch for ch in os.environ.get("PYTEST_XDIST_WORKER", "") if ch.isdigit()) or 0)
_PORTS_PER_PROCESS = 1000
_FIRST_PORT = 12000 + (_WORKER % 20) * _PORTS_PER_PROCESS
_next_port = _FIRST_PORT + (os.getpid() % _PORTS_PER_PROCESS)


def free_port() -> int:
    """A TCP port nobody listens on right now, from this test process's own range."""
    global _next_port
    for _ in range(_PORTS_PER_PROCESS):
        port = _next_port
        _next_port = _FIRST_PORT + (port + 1 - _FIRST_PORT) % _PORTS_PER_PROCESS
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_FIRST_PORT}-{_FIRST_PORT + _PORTS_PER_PROCESS - 1}")


class ServerProcess:
    """One server process; restartable with the same data dir, port and executor id."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None = None,
        *,
        model: str = "none",
        executor_id: str | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "NIGHTOWL_DATA_DIR": str(data_dir),
            "NIGHTOWL_PORT": str(self.port),
            "NIGHTOWL_MODEL": model,
            "NIGHTOWL_HEARTBEAT_INTERVAL_S": "0.5",
            "NIGHTOWL_HEARTBEAT_TIMEOUT_S": "3",
            # Sandboxes' host uids apart per test process (test processes run side by side).
            "NIGHTOWL_SANDBOX_UID_BASE": str(3_100_000 + (os.getpid() % 1000) * 500),
            # Tests poll fast; the rate limits have tests of their own (tests/api/test_edge.py).
            "NIGHTOWL_RATE_LIMIT_PER_TOKEN": "0",
            "NIGHTOWL_RATE_LIMIT_PER_ADDRESS": "0",
            **(env or {}),
        }
        if database_url:
            self.env["NIGHTOWL_DATABASE_URL"] = database_url
        if executor_id:
            self.env["NIGHTOWL_EXECUTOR_ID"] = executor_id
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / f"server-{self.port}.log"
        self.starts = 0

    def launch(self) -> None:
        """Start the process without waiting for it (a crash test may kill it mid-start)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [NIGHTOWL, "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def start(self, timeout: float = 120) -> ServerProcess:
        """Start the process and wait until /healthz answers (a loaded machine runs the
        migrations and the start-up checks slowly: the default allows for it)."""
        self.launch()
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1, verify=TLS).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"server did not come up:\n{self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """A clean stop (SIGTERM), or SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def token(self) -> str:
        """The owner's access token the server wrote on first start."""
        return (self.data_dir / "owner-token").read_text().strip()

    def member_token(self, name: str) -> str:
        """An access token of a new user `name`, made with the CLI."""
        out = subprocess.run(
            [NIGHTOWL, "token", "create", "--user", name, "--new-user", "--name", "test"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split(": ", 1)[1].splitlines()[0].strip()

    def client(self, token: str | None = None) -> httpx.Client:
        """An HTTP client authenticated as the owner (or with `token`)."""
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=30,
            verify=TLS,
        )

    def log_lines(self) -> list[dict[str, Any]]:
        """The server's JSON log lines (the start banner is skipped)."""
        lines = []
        for raw in self.log_path.read_text().splitlines():
            if raw.startswith("{"):
                lines.append(json.loads(raw))
        return lines


def wait_for(predicate: Any, timeout: float = 30, interval: float | None = None) -> Any:
    """Poll until `predicate()` is truthy; return its value or fail after `timeout` seconds.

    Without an `interval` it polls after 50 ms, then half as long again each time up to a
    quarter second: a short wait ends soon, and a long one does not spend the machine's CPU
    (each poll is a request the server answers or a store read) on 20 polls a second while
    the suite runs four test processes on two cores.
    """
    deadline = time.monotonic() + timeout
    pause = interval or 0.05
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(pause)
        if interval is None:
            pause = min(pause * 1.5, 0.25)
    raise AssertionError(f"condition not met within {timeout}s")


def write_script(
    path: Path, replies: list[dict[str, Any]], then: str = "silent", summary: str = ""
) -> str:
    """Write a scripted-model file and return the NIGHTOWL_MODEL value for it (`summary`
    answers compaction requests)."""
    path.write_text(json.dumps({"replies": replies, "then": then, "summary": summary}))
    return f"scripted:{path}"


def say(text: str, **arguments: Any) -> dict[str, Any]:
    """A scripted-model reply that calls send_to_user (buttons, draft, final … as given)."""
    return {"tool_calls": [{"name": "send_to_user", "arguments": {"text": text, **arguments}}]}
