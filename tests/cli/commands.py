"""Running the `nightowl` command in a process of its own, on a data dir of a test's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.server import NIGHTOWL


def run_nightowl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`nightowl ARGS...`, its output captured."""
    return subprocess.run([NIGHTOWL, *args], env=env, capture_output=True, text=True, timeout=120)


def data_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment with a data dir under `tmp_path` and `extra` settings."""
    return {**os.environ, "NIGHTOWL_DATA_DIR": str(tmp_path / "data"), **extra}
