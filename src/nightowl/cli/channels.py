"""`nightowl channels add|list|remove|test|bind`: the owner's e-mail, Matrix and Slack channels,
through the running server (which holds the vault and runs the listeners)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nightowl.cli.client import Commands, Server


def add_commands(commands: Commands) -> None:
    """The `channels` command and its subcommands."""
    channels = commands.add_parser(
        "channels", help="e-mail, Matrix, Slack and Telegram channels (the server)"
    )
    channels.add_argument("--url", dest="server_url", help="the server (default: local)")
    sub = channels.add_subparsers(dest="channels_command", required=True)
    add = sub.add_parser(
        "add", help="add one: NAME --kind email|matrix|slack|telegram --set KEY=VALUE ..."
    )
    add.add_argument("name")
    add.add_argument("--kind", required=True, choices=["email", "matrix", "slack", "telegram"])
    add.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting (docs/channels.md); credentials are vault secrets named by *_secret",
    )
    sub.add_parser("list", help="your channels, their state and deliveries")
    sub.add_parser("remove", help="remove a channel").add_argument("name")
    sub.add_parser("test", help="connect with its settings and credentials now").add_argument(
        "name"
    )
    bind = sub.add_parser("bind", help="show a conversation on a channel from now on")
    bind.add_argument("conversation")
    bind.add_argument("name")
    bind.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    channels.set_defaults(run=run)


def _settings(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; a value that reads as JSON (a number, true, a list) is taken as such."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            found[key.strip()] = json.loads(value)
        except ValueError:
            found[key.strip()] = value
    return found


def run(args: argparse.Namespace) -> int:
    """Carry out one `channels` subcommand; 0 when it worked, 2 when it did not."""
    command = args.channels_command

    server = Server("channels", args.server_url)

    if command == "add":
        body = {"name": args.name, "kind": args.kind, "settings": _settings(args.set)}
        added = f"added {args.name}; `nightowl channels test {args.name}` connects now"
        return server.call("POST", "/v1/channels", added, body)
    if command == "list":
        response = server.request("GET", "/v1/channels")
        if response is None:
            return 2
        for c in response.json():
            counts = ", ".join(f"{n} {state}" for state, n in sorted(c["deliveries"].items()))
            print(f"{c['name']:<16} {c['kind']:<8} {c['status']:<7} {counts or 'no deliveries'}")
            if c["error"]:
                print(f"{'':<16} {c['error']}")
            if c.get("ingress_url"):  # the URL to give a service that pushes events (Slack)
                print(f"{'':<16} events URL: {c['ingress_url']}")
        if not response.json():
            print("no channels; `nightowl channels add NAME --kind email --set ...` adds one")
        return 0
    if command == "remove":
        return server.call("DELETE", f"/v1/channels/{args.name}", f"removed {args.name}")
    if command == "test":
        response = server.request("POST", f"/v1/channels/{args.name}/test")
        if response is None:
            return 2
        report = response.json()
        print(f"{args.name} {'works' if report['ok'] else 'failed'}: {report['detail']}")
        return 0 if report["ok"] else 2
    return server.call(
        "POST",
        f"/v1/conversations/{args.conversation}/channels",
        f"{args.conversation} is shown on {args.name} from its next message on",
        {"channel": args.name, "address": {k: str(v) for k, v in _settings(args.set).items()}},
    )
