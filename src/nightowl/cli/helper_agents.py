"""`nightowl helpers`: the owner's helpers (talks to the running server)."""

from __future__ import annotations

import argparse
from typing import Any

from nightowl.cli.client import Commands, call_server


def add_commands(commands: Commands) -> None:
    """Add `nightowl helpers [--conversation ID] [stop ID]`."""
    helpers = commands.add_parser("helpers", help="background helpers (talks to the server)")
    helpers.add_argument("--url", help="server URL (default: from settings)")
    helpers.add_argument("--conversation", help="only this conversation's helpers")
    sub = helpers.add_subparsers(dest="helpers_command")
    stop = sub.add_parser("stop", help="stop a working helper (needs --conversation)")
    stop.add_argument("id")
    helpers.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List helpers, or stop one; 2 when the server refused or cannot be reached."""
    if args.helpers_command == "stop":
        if not args.conversation:
            print("nightowl helpers stop: give the helper's --conversation ID")
            return 2
        path = f"/v1/conversations/{args.conversation}/helpers/{args.id}/stop"
        response = call_server("helpers", args.url, "POST", path)
        if response is None:
            return 2
        print(_line(response.json()))
        return 0
    path = f"/v1/conversations/{args.conversation}/helpers" if args.conversation else "/v1/helpers"
    response = call_server("helpers", args.url, "GET", path)
    if response is None:
        return 2
    found = response.json()
    for helper in found:
        print(_line(helper))
    if not found:
        print("no helpers")
    return 0


def _line(helper: dict[str, Any]) -> str:
    name = helper["name"] or "-"
    progress = f" ({helper['progress']})" if helper["progress"] else ""
    return (
        f"{helper['id']}  {name:<14} {helper['status']:<8} ${helper['cost_usd']:>8.4f}  "
        f"{helper['tokens']:>8,} tok  {helper['conversation_id']}  {helper['task'][:50]}{progress}"
    )
