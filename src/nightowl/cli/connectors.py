"""`nightowl connectors add|list|remove|test|trust|limit`: the owner's MCP connectors, through
the running server (a stdio server is tested inside the owner's computer, which the server
runs)."""

from __future__ import annotations

import argparse
from typing import Any

from nightowl.cli.client import Commands, Server


def add_commands(commands: Commands) -> None:
    """The `connectors` command and its subcommands."""
    connectors = commands.add_parser("connectors", help="MCP servers as tools (the server)")
    connectors.add_argument("--url", dest="server_url", help="the server (default: local)")
    sub = connectors.add_subparsers(dest="connectors_command", required=True)
    add = sub.add_parser(
        "add",
        help="add one: NAME -- COMMAND ARGS... (runs inside your computer) or NAME --url URL",
    )
    add.add_argument("name")
    add.add_argument("--url", help="a streamable-HTTP MCP server")
    add.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an HTTP header; the value may name secrets: {{secret:NAME}}",
    )
    add.add_argument("--oauth", action="store_true", help="the server uses OAuth 2.1")
    add.add_argument("--description", default="", help="what it is for (the agent reads it)")
    add.add_argument("--trusted", action="store_true", help="trust what its tools return")
    add.add_argument("command", nargs="*", help="after --: the command and its arguments")
    sub.add_parser("list", help="your connectors and their status")
    for verb, text in (
        ("remove", "remove a connector"),
        ("test", "connect now, list tools"),
        ("authorize", "authorise nightowl with an OAuth connector (prints the URL to open)"),
    ):
        sub.add_parser(verb, help=text).add_argument("name")
    sub.add_parser(
        "diff", help="what a connector lists now that you have not approved (held tools)"
    ).add_argument("name")
    approve = sub.add_parser("approve", help="approve held tools as listed now (all, or some)")
    approve.add_argument("name")
    approve.add_argument("tools", nargs="*", help="only these (their names on the server)")
    sampling = sub.add_parser("sampling", help="let a connector's server use your model (--no)")
    sampling.add_argument("name")
    sampling.add_argument("--no", action="store_true")
    trust = sub.add_parser("trust", help="trust (or --no) what a connector's tools return")
    trust.add_argument("name")
    trust.add_argument("--no", action="store_true")
    effect = sub.add_parser("effect", help="set a tool's effect: read, write, send or spend")
    effect.add_argument("name")
    effect.add_argument("tool", help="the tool's name on its server")
    effect.add_argument("effect", choices=["read", "write", "send", "spend", "default"])
    limit = sub.add_parser("limit", help="the connectors a conversation may use (none: all)")
    limit.add_argument("conversation")
    limit.add_argument("names", nargs="*")
    limit.add_argument("--all", action="store_true", help="every connector (the default)")
    connectors.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one `connectors` subcommand; 0 when it worked, 2 when it did not."""
    command = args.connectors_command

    server = Server("connectors", args.server_url)

    if command == "add":
        if bool(args.url) == bool(args.command):
            print("nightowl connectors: give `-- COMMAND ARGS...` or `--url URL` (one of them)")
            return 2
        headers = dict(h.split("=", 1) for h in args.header if "=" in h)
        body = {
            "name": args.name,
            "command": args.command or None,
            "url": args.url,
            "headers": headers,
            "auth": "oauth" if args.oauth else "none",
            "description": args.description,
            "trusted": args.trusted,
        }
        added = f"added {args.name}; `nightowl connectors test {args.name}` connects now"
        return server.call("POST", "/v1/connectors", added, body)
    if command == "list":
        response = server.request("GET", "/v1/connectors")
        if response is None:
            return 2
        for c in response.json():
            where = " ".join(c["command"]) if c["transport"] == "stdio" else c["url"]
            trust = "trusted" if c["trusted"] else "untrusted output"
            print(
                f"{c['name']:<16} {c['status']:<10} {len(c['tools']):>3} tools  {trust:<16} {where}"
            )
            if c["error"]:
                print(f"{'':<16} {c['error']}")
            if c["held"]:
                print(
                    f"{'':<16} held until you approve them (`nightowl connectors diff "
                    f"{c['name']}`): {', '.join(c['held'])}"
                )
            if c.get("package_change"):
                print(
                    f"{'':<16} its package changed, so it does not start until you approve it "
                    f"(`nightowl connectors diff {c['name']}`)"
                )
        if not response.json():
            print("no connectors; `nightowl connectors add NAME -- COMMAND` adds one")
        return 0
    if command == "remove":
        return server.call("DELETE", f"/v1/connectors/{args.name}", f"removed {args.name}")
    if command == "test":
        response = server.request("POST", f"/v1/connectors/{args.name}/test")
        if response is None:
            return 2
        report = response.json()
        if not report["ok"]:
            print(f"{args.name} failed: {report['error']}\nwhat to do: {report['advice']}")
            return 2
        print(f"{args.name} works; {len(report['tools'])} tools:")
        for tool in report["tools"]:
            print(f"  {tool['name']:<40} {tool['effect']:<6} {tool['summary']}")
        if report.get("held"):
            print(
                f"held until you approve them (`nightowl connectors diff {args.name}`): "
                + ", ".join(report["held"])
            )
        return 0
    if command == "diff":
        response = server.request("GET", f"/v1/connectors/{args.name}/diff")
        if response is None:
            return 2
        changes = response.json()
        if not changes:
            print(f"{args.name}: every listed tool is as you approved it")
            return 0
        for held_tool in changes:
            if held_tool["kind"] == "package":
                print(f"== package {held_tool['name']} (changed; does not start until approved)")
            else:
                print(f"== {held_tool['name']} ({held_tool['kind']}; not offered until approved)")
            print(held_tool["diff"])
        print(f"`nightowl connectors approve {args.name}` approves them as listed now")
        return 0
    if command == "approve":
        body = {"tools": args.tools or None}
        response = server.request("POST", f"/v1/connectors/{args.name}/approve", body)
        if response is None:
            return 2
        held = response.json()["held"]
        print(
            f"approved; {args.name} still holds: {', '.join(held)}"
            if held
            else f"approved; every tool {args.name} lists is offered"
        )
        return 0
    if command == "authorize":
        response = server.request("POST", f"/v1/connectors/{args.name}/authorize")
        if response is None:
            return 2
        url = response.json()["authorize_url"]
        if url is None:
            print(f"{args.name} is authorised already")
        else:
            print(f"open this to authorise nightowl with {args.name}:\n{url}")
        return 0
    if command in ("trust", "effect", "sampling"):
        if command == "trust":
            change: dict[str, Any] = {"trusted": not args.no}
        elif command == "sampling":
            change = {"sampling": not args.no}
        else:
            change = {"effects": {args.tool: "" if args.effect == "default" else args.effect}}
        return server.call("PATCH", f"/v1/connectors/{args.name}", f"changed {args.name}", change)
    names = None if args.all or not args.names else args.names
    response = server.request(
        "PUT", f"/v1/conversations/{args.conversation}/connectors", {"connectors": names}
    )
    if response is None:
        return 2
    allowed = response.json()["connectors"]
    print("every connector" if allowed is None else ", ".join(allowed) or "no connectors")
    return 0
