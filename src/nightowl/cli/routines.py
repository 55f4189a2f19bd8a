"""`nightowl routines create|list|firings|approve|pause|resume|delete`: scheduled prompts
(talks to the running server)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nightowl.cli.client import Commands, call_server
from nightowl.harness.watches import WATCH_KINDS


def add_commands(commands: Commands) -> None:
    """Add `routines` and its subcommands."""
    routines = commands.add_parser("routines", help="scheduled prompts (talks to the server)")
    routines.add_argument("--url", help="server URL (default: from settings)")
    routines_commands = routines.add_subparsers(dest="routines_command", required=True)
    routines_create = routines_commands.add_parser("create", help="an active routine")
    routines_create.add_argument("name")
    routines_create.add_argument("cron", help="e.g. '0 8 * * 1-5'")
    routines_create.add_argument("prompt")
    routines_create.add_argument("--timezone", default="UTC")
    routines_create.add_argument(
        "--catch-up",
        choices=("latest", "all", "none"),
        default="latest",
        help="due times missed while the server was down: one firing for all (latest), "
        "each (all), or none",
    )
    for kind, what in (
        ("url", "a web page"),
        ("file", "a file in the computer's home (a relative path)"),
        ("webhook", "a webhook's deliveries (its id)"),
        ("imap", "a folder of your e-mail channel for new mail (e.g. INBOX)"),
        ("resource", "a connector's resource (its URI; name the connector with --via)"),
    ):
        routines_create.add_argument(
            f"--watch-{kind}",
            metavar="FOLDER" if kind == "imap" else "URI" if kind == "resource" else kind.upper(),
            help=f"check {what} without the model first; skip the firing when unchanged",
        )
    routines_create.add_argument(
        "--via",
        metavar="NAME",
        help="the e-mail channel (--watch-imap; needed with several) or the connector "
        "(--watch-resource) the watch reads through",
    )
    routines_create.add_argument(
        "--done-when-sent",
        action="store_true",
        help="a run is done only when it sent you a message (else: failed, not done)",
    )
    routines_create.add_argument(
        "--done-when-file",
        metavar="PATH",
        help="a run is done only when it wrote this file in the computer's home",
    )
    routines_create.add_argument(
        "--skip-quiet-hours",
        action="store_true",
        help="skip the due times inside your quiet hours (default: run them; their messages "
        "wait for the quiet hours to end)",
    )
    routines_commands.add_parser("list", help="routines, their status and firing outcomes")
    routines_firings = routines_commands.add_parser(
        "firings", help="a routine's due times and what became of each, newest first"
    )
    routines_firings.add_argument("id")
    routines_firings.add_argument("--limit", type=int, default=50)
    for verb in ("approve", "pause", "resume", "delete"):
        routines_commands.add_parser(verb, help=f"{verb} a routine by id").add_argument("id")
    routines.set_defaults(run=run)


def _create_payload(args: argparse.Namespace) -> dict[str, object] | None:
    """The new routine's JSON body, or None once it has said which flags do not go together."""
    payload: dict[str, object] = {
        "name": args.name,
        "prompt": args.prompt,
        "cron": args.cron,
        "timezone": args.timezone,
        "catch_up": args.catch_up,
        "quiet_hours": "skip" if args.skip_quiet_hours else "run",
    }
    watches = [(k, getattr(args, f"watch_{k}")) for k in WATCH_KINDS]
    chosen = [(kind, target) for kind, target in watches if target]
    if len(chosen) > 1:
        flags = ", ".join(f"--watch-{k}" for k in WATCH_KINDS)
        print(f"give at most one of {flags}", file=sys.stderr)
        return None
    if args.via and not (chosen and chosen[0][0] in ("imap", "resource")):
        print("--via goes with --watch-imap or --watch-resource", file=sys.stderr)
        return None
    if chosen:
        watch = {"kind": chosen[0][0], "target": chosen[0][1]}
        payload["watch"] = {**watch, "via": args.via} if args.via else watch
    if args.done_when_sent and args.done_when_file:
        print("give at most one of --done-when-sent, --done-when-file", file=sys.stderr)
        return None
    if args.done_when_sent:
        payload["done_when"] = {"kind": "sent"}
    elif args.done_when_file:
        payload["done_when"] = {"kind": "file", "path": args.done_when_file}
    return payload


def run(args: argparse.Namespace) -> int:
    """Carry out one `routines` subcommand; 2 when the flags or the server refused it."""
    command = args.routines_command
    payload: dict[str, object] | None = None
    if command == "create":
        method, path = "POST", "/v1/routines"
        payload = _create_payload(args)
        if payload is None:
            return 2
    elif command == "list":
        method, path = "GET", "/v1/routines"
    elif command == "firings":
        method, path = "GET", f"/v1/routines/{args.id}/firings?limit={args.limit}"
    elif command == "delete":
        method, path = "DELETE", f"/v1/routines/{args.id}"
    else:
        method, path = "POST", f"/v1/routines/{args.id}/{command}"
    response = call_server("routines", args.url, method, path, payload)
    if response is None:
        return 2
    if response.status_code == 204:
        print(f"deleted {args.id}")
        return 0
    body = response.json()
    if command == "firings":
        for firing in body:
            why = f"  {firing['reason']}" if firing["reason"] else ""
            turn = f"  {firing['turn_id']}" if firing["turn_id"] else ""
            missed = f"  (stood for {firing['missed']} missed)" if firing["missed"] else ""
            print(f"{firing['due_at']}  {firing['outcome']:<8}{missed}{turn}{why}")
        if not body:
            print("no due time yet")
        return 0
    for routine in body if isinstance(body, list) else [body]:
        print(_line(routine))
    return 0


def _line(routine: dict[str, Any]) -> str:
    """One routine: its schedule, outcomes, watch, postcondition and quiet-hours policy."""
    counts = routine["outcomes"]
    line = (
        f"{routine['id']}  {routine['status']:<16} {routine['cron']:<16} "
        f"{routine['timezone']:<14} {routine['name']}  "
        f"(ran {counts['ran']}, skipped {counts['skipped']}, failed {counts['failed']}; "
        f"catch-up {routine['catch_up']})"
    )
    if routine.get("watch"):
        watch = routine["watch"]
        line += f"  watches {watch['kind']} {watch['target']}"
        line += f" via {watch['via']}" if watch.get("via") else ""
    if routine.get("done_when"):
        done_when = routine["done_when"]
        line += "  done when " + (
            "a message was sent"
            if done_when["kind"] == "sent"
            else f"{done_when['path']} was written"
        )
    if routine.get("quiet_hours") == "skip":
        line += "  skips quiet hours"
    return line
