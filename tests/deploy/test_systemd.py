"""The systemd units in deploy/systemd: valid for systemd, and their hardening keeps sandboxes
working (this machine has no systemd running, so a unit's settings are checked one by one)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server import NIGHTOWL

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED = "/opt/nightowl/venv/bin/nightowl"  # where the units expect nightowl


def _unit_files() -> list[Path]:
    return sorted([*UNITS.glob("*.service"), *UNITS.glob("*.timer")])


def _service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(UNITS / name)
    return parser["Service"]


def test_systemd_accepts_every_unit_without_a_warning(tmp_path: Path) -> None:
    """`systemd-analyze verify` on the units as installed (nightowl at this venv's path)."""
    for unit in _unit_files():
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, NIGHTOWL))
    names = [str(tmp_path / unit.name) for unit in _unit_files()]
    assert len(names) >= 4
    checked = subprocess.run(
        ["systemd-analyze", "verify", *names], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr


def test_the_worker_and_the_computer_host_run_their_commands() -> None:
    assert _service("nightowl.service")["ExecStart"] == f"{INSTALLED} serve"
    assert _service("nightowl-computer-host.service")["ExecStart"] == f"{INSTALLED} computer-host"


@pytest.mark.parametrize("backend", ["bubblewrap", "gvisor"])
def test_a_sandbox_works_under_the_units_no_new_privileges(backend: str) -> None:
    for unit in ("nightowl.service", "nightowl-computer-host.service"):
        assert _service(unit)["NoNewPrivileges"] == "yes"
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    ran = subprocess.run(
        [
            setpriv,
            "--no-new-privs",
            sys.executable,
            "-m",
            "tests.deploy.sandbox_under_nnp",
            backend,
        ],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
