"""`nightowl memory …`: the owner sees, searches and corrects memory (talks to the server)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nightowl.cli.client import Commands, call_server
from nightowl.memory.search import KINDS


def add_commands(commands: Commands) -> None:
    """Add the `memory` command group."""
    memory = commands.add_parser("memory", help="see, search and correct memory (via the server)")
    memory.add_argument("--url", help="server URL (default: from settings)")
    groups = memory.add_subparsers(dest="memory_group", required=True)

    facts = groups.add_parser("facts", help="profile facts").add_subparsers(
        dest="memory_command", required=True
    )
    listing = facts.add_parser("list", help="the profile (with where each fact came from)")
    listing.add_argument("--archived", action="store_true", help="archived facts too")
    facts.add_parser("add", help="tell nightowl a fact").add_argument("text")
    edit = facts.add_parser("edit", help="correct a fact")
    edit.add_argument("id")
    edit.add_argument("text")
    for verb in ("archive", "restore", "delete"):
        facts.add_parser(verb, help=f"{verb} a fact by id").add_argument("id")

    log = groups.add_parser("log", help="the dated work log").add_subparsers(
        dest="memory_command", required=True
    )
    log.add_parser("list", help="newest entries first").add_argument(
        "--limit", type=int, default=30
    )
    log_edit = log.add_parser("edit", help="correct an entry")
    log_edit.add_argument("id")
    log_edit.add_argument("text")
    log.add_parser("delete", help="delete an entry by id").add_argument("id")

    skills = groups.add_parser("skills", help="skills (how-tos)").add_subparsers(
        dest="memory_command", required=True
    )
    skills.add_parser("list", help="skills and whether they are reviewed")
    for verb in ("show", "approve", "delete"):
        skills.add_parser(verb, help=f"{verb} a skill by id").add_argument("id")

    groups.add_parser("notes", help="live notes")
    search = groups.add_parser("search", help="search messages, log, notes, skills, facts")
    search.add_argument("query")
    search.add_argument("--kind", action="append", choices=KINDS, help="limit to a kind")
    groups.add_parser("consolidations", help="how a full profile was consolidated")
    changes = groups.add_parser(
        "history", help="every change to facts, skills and notes (who, from what), newest first"
    )
    changes.add_argument("id", nargs="?", help="only this fact, skill or note")
    changes.add_argument("--turn", help="only what this turn changed")
    changes.add_argument("--limit", type=int, default=50)
    undo = groups.add_parser(
        "revert", help="undo one change (its number), or all one turn or message wrote"
    )
    undo.add_argument("change", nargs="?", type=int, help="the change's number (from history)")
    undo.add_argument("--turn", help="every change this turn made")
    undo.add_argument("--message", help="every change made from this message")
    memory.set_defaults(run=run)


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None, Any]:
    """(method, path, JSON body, query) for the command."""
    group, command = args.memory_group, getattr(args, "memory_command", None)
    if group == "notes":
        return "GET", "/v1/memory/notes", None, None
    if group == "consolidations":
        return "GET", "/v1/memory/consolidations", None, None
    if group == "history":
        wanted = {"item_id": args.id, "turn_id": args.turn, "limit": args.limit}
        return "GET", "/v1/memory/history", None, {k: v for k, v in wanted.items() if v}
    if group == "revert":
        given = {"change": args.change, "turn_id": args.turn, "message_id": args.message}
        return "POST", "/v1/memory/revert", {k: v for k, v in given.items() if v}, None
    if group == "search":
        return "GET", "/v1/memory/search", None, {"q": args.query, "kind": args.kind or []}
    base = {"facts": "/v1/memory/facts", "log": "/v1/memory/log", "skills": "/v1/memory/skills"}
    path = base[group]
    if command == "list":
        query = {"archived": "true"} if getattr(args, "archived", False) else None
        return "GET", path, None, {"limit": args.limit} if group == "log" else query
    if command == "add":
        return "POST", path, {"text": args.text}, None
    if command == "edit":
        key = "summary" if group == "log" else "text"
        return "PATCH", f"{path}/{args.id}", {key: args.text}, None
    if command in ("archive", "restore"):
        return "PATCH", f"{path}/{args.id}", {"archived": command == "archive"}, None
    if command == "approve":
        return "PATCH", f"{path}/{args.id}", {"approved": True}, None
    if command == "show":
        return "GET", f"{path}/{args.id}", None, None
    return "DELETE", f"{path}/{args.id}", None, None


def _print(group: str, body: Any) -> None:
    for item in body if isinstance(body, list) else [body]:
        if group == "facts":
            state = " (archived)" if item["archived"] else ""
            print(
                f"{item['id']}  {item['trust']:<9} used {item['use_count']:<3} "
                f"{item['text']}{state}"
            )
        elif group == "log":
            trust = item.get("trust", "")
            print(f"{item['id']}  {trust:<9} {item['created_at'][:16]}  {item['summary']}")
        elif group == "skills" and "body" in item and not isinstance(body, list):
            print(f"# {item['name']} ({'approved' if item['approved'] else 'not reviewed'})")
            print(item["description"], "\n", item["body"], sep="\n")
        elif group == "skills":
            state = "approved" if item["approved"] else "needs review"
            print(f"{item['id']}  {state:<12} {item['name']}: {item['description']}")
        elif group == "notes":
            trust = item.get("trust", "")
            print(f"{item['id']}  {trust:<9} until {item['expires_at'][:16]}  {item['text']}")
        elif group in ("history", "revert"):
            print(_change_line(item))
        elif group == "search":
            print(f"{item['kind']:<8} {item['at'][:10]}  {item['text'][:200]}")
        else:
            print(f"{item['created_at'][:16]}  {item['method']:<10} {item['detail']}")


def _change_line(change: dict[str, Any]) -> str:
    def text(state: dict[str, Any] | None) -> str:
        if state is None:
            return "(none)"
        said = " ".join(str(state.get("text") or state.get("name") or "").split())
        return repr(said if len(said) <= 80 else said[:79] + "…")

    before, after = text(change["before"]), text(change["after"])
    what = {
        "added": f"added {after}",
        "removed": f"removed {before}",
        "archived": f"archived {before}",
        "restored": f"brought back {after}",
    }.get(change["action"], f"{change['action']} {before} -> {after}")
    source = f" turn {change['turn_id']}" if change["turn_id"] else ""
    undone = f"  [reverted by #{change['reverted_by']}]" if change["reverted_by"] else ""
    return (
        f"#{change['id']:<5} {change['created_at'][:16]}  {change['kind']:<5} "
        f"{change['item_id']}  by {change['author']} ({change['trust']}){source}: {what}{undone}"
    )


def run(args: argparse.Namespace) -> int:
    """Run a `nightowl memory` command against the server; exit 2 with the reason on failure."""
    if args.memory_group == "revert":
        chosen = [args.change is not None, bool(args.turn), bool(args.message)]
        if sum(chosen) != 1:
            print("give one change number, --turn TURN or --message MESSAGE", file=sys.stderr)
            return 2
    response = call_server("memory", args.url, *_request(args))
    if response is None:
        return 2
    if response.status_code == 204:
        print(f"deleted {args.id}")
        return 0
    found = response.json()
    if isinstance(found, list) and not found:
        print("(nothing)")
    _print(args.memory_group, found)
    return 0
