"""A real trace server for the tracing tests: Arize Phoenix, started on 127.0.0.1 (free ports
for HTTP and gRPC, its data in a temp folder, its telemetry and assistant's network access
off) from the venv scripts/install-trace-server.sh caches outside the checkout. It receives
OTLP over HTTP (/v1/traces) and gRPC, and its REST API returns the spans it stored."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.server import TLS, free_port

CACHE = Path(
    os.environ.get("NIGHTOWL_TRACE_SERVER") or Path.home() / ".cache" / "nightowl" / "trace-server"
)
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-trace-server.sh"


def ensure_installed() -> None:
    """Install Phoenix's venv (once; the script keeps a stamp)."""
    subprocess.run([str(SCRIPT)], check=True)


class Phoenix:
    """One Phoenix process; `spans` reads back what it stored."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_url = f"http://127.0.0.1:{self.grpc_port}"
        self.log = folder / "phoenix.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> Phoenix:
        self.folder.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(self.folder),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            # Nothing leaves the machine: no usage telemetry, no assistant reaching out.
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
            "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
            "PHOENIX_AGENTS_DISABLE_BASH": "true",
        }
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(CACHE / "phoenix" / "bin" / "phoenix"), "serve"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Phoenix exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1, verify=TLS).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"Phoenix did not come up: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None

    def spans(self, **query: Any) -> list[dict[str, Any]]:
        """Every stored span matching the REST API's filters (trace_id, name, …)."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 1000, **query}
        while True:
            page = httpx.get(
                f"{self.url}/v1/projects/default/spans", params=params, timeout=30, verify=TLS
            )
            page.raise_for_status()
            body = page.json()
            found += body["data"]
            if not body.get("next_cursor"):
                return found
            params["cursor"] = body["next_cursor"]
