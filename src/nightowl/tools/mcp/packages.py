"""Finding what package a stdio connector's command runs, inside the owner's computer.

The probe (`package_probe.py`) runs in the system's Python as the computer's own user, just
before the server starts; what it found is compared with the connector's pin
(`store/connectors.py`: `record_package`; harness/tool_pins.py: `package_change`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.store.connectors import ConnectorInfo

PROBE_SOURCE = (Path(__file__).parent / "package_probe.py").read_text()
PROBE_TIMEOUT_S = 60.0
SYSTEM_PYTHON = "/usr/bin/python3"


class PackageCheckFailed(Exception):
    """The probe could not say what the command runs (the server must not start)."""


async def probe_package(sandbox: Computer, connector: ConnectorInfo) -> dict[str, Any]:
    """What the connector's command runs, as the probe found it (see package_probe.py)."""
    output = f".nightowl/pins/{connector.name}.json"
    argv = [SYSTEM_PYTHON, "-I", "-S", "-c", PROBE_SOURCE, *connector.command]
    try:
        ended = await sandbox.run(
            argv, output=output, timeout_s=PROBE_TIMEOUT_S, env={"HOME": HOME_INSIDE}
        )
        if ended.exit_code != 0:
            why = "took too long" if ended.timed_out else f"ended with status {ended.exit_code}"
            raise PackageCheckFailed(f"could not check what {connector.name} runs: the check {why}")
        answer = await sandbox.call({"op": "read", "path": output}, timeout_s=30)
    except SandboxError as error:
        raise PackageCheckFailed(f"could not check what {connector.name} runs: {error}") from error
    if answer.get("cut") or answer.get("binary"):
        raise PackageCheckFailed(f"could not check what {connector.name} runs: too much to read")
    try:
        found = json.loads(str(answer.get("text") or ""))
    except ValueError as error:
        raise PackageCheckFailed(
            f"could not check what {connector.name} runs: the check answered no JSON"
        ) from error
    if not isinstance(found, dict):
        raise PackageCheckFailed(f"could not check what {connector.name} runs")
    if found.get("kind") == "error":
        why = str(found.get("error"))
        raise PackageCheckFailed(f"could not check what {connector.name} runs: {why}")
    return found
