"""The `nightowl` command line: one module per command group (`nightowl serve` is
`cli/serve.py`), each adding its parsers; `client.py` holds how commands reach nightowl."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from nightowl.cli import (
    audit,
    backup,
    channels,
    chat,
    connectors,
    doctor,
    evals,
    helper_agents,
    hooks,
    inbox,
    memory,
    models,
    report,
    routines,
    secrets,
    serve,
    token,
    usage,
)

# In the order `nightowl --help` lists them (`backup` adds `restore` too, `serve` adds
# `computer-host`).
_GROUPS = (
    serve,
    chat,
    token,
    doctor,
    usage,
    report,
    hooks,
    routines,
    memory,
    models,
    secrets,
    audit,
    connectors,
    channels,
    helper_agents,
    inbox,
    backup,
    evals,
)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    root = argparse.ArgumentParser(prog="nightowl", description="An always-on agent server.")
    commands = root.add_subparsers(dest="command", required=True)
    for group in _GROUPS:
        group.add_commands(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `nightowl` console script."""
    args = parser().parse_args(argv)
    code: int = args.run(args)
    return code
