"""`nightowl doctor [--model]`: check the set-up and say what to fix (nightowl/doctor.py holds
the checks)."""

from __future__ import annotations

import argparse

from nightowl.cli.client import Commands, load_settings


def add_commands(commands: Commands) -> None:
    """Add `doctor`."""
    doctor = commands.add_parser("doctor", help="check the set-up")
    doctor.add_argument(
        "--model",
        action="store_true",
        help="only the model (the local one answers a short generation in its own process)",
    )
    doctor.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print each check; 1 when a required one failed."""
    from nightowl.doctor import run_checks, run_model_check

    failed = 0
    checks = run_model_check if args.model else run_checks
    for check in checks(load_settings()):
        mark = "ok  " if check.ok else ("FAIL" if check.required else "warn")
        print(f"[{mark}] {check.name}: {check.detail}")
        if check.fix and not check.ok:
            print(f"       fix: {check.fix}")
        failed += int(not check.ok and check.required)
    return 1 if failed else 0
