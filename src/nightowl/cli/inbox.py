"""`nightowl inbox`: what waits on the owner, and answering it (talks to the running server)."""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime
from typing import Any

from nightowl.cli.client import Commands, call_server
from nightowl.store.inbox import KINDS


def add_commands(commands: Commands) -> None:
    """Add `nightowl inbox [--conversation ID] [--kind K] [answer ID CHOICE | read ID]`."""
    inbox = commands.add_parser("inbox", help="what waits on you (talks to the server)")
    inbox.add_argument("--url", help="server URL (default: from settings)")
    inbox.add_argument("--conversation", help="only this conversation's items")
    inbox.add_argument("--kind", action="append", choices=KINDS, help="only this kind (repeat)")
    sub = inbox.add_subparsers(dest="inbox_command")
    answer = sub.add_parser(
        "answer", help="answer an item: a button's label or value, or send/discard a draft"
    )
    answer.add_argument("id")
    answer.add_argument("choice")
    read = sub.add_parser("read", help="mark a notice (report, failed turn) as read")
    read.add_argument("id")
    inbox.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List the inbox, answer an item or mark one read; 2 when the server refused."""
    query: dict[str, Any] = {}
    if args.conversation:
        query["conversation_id"] = args.conversation
    if args.kind:
        query["kind"] = args.kind
    if args.inbox_command in ("answer", "read"):
        query = {}  # the item is looked up among all of them
    response = call_server("inbox", args.url, "GET", "/v1/inbox", None, query)
    if response is None:
        return 2
    items: list[dict[str, Any]] = response.json()["items"]
    if args.inbox_command is None:
        for listed in items:
            print(_line(listed))
        if not items:
            print("nothing waits on you")
        return 0
    item: dict[str, Any] | None = next((i for i in items if i["id"] == args.id), None)
    if item is None:
        print(f"nightowl inbox: no item {args.id!r} waits on you (answered, or read, already?)")
        return 2
    conversation = item["conversation_id"]
    if args.inbox_command == "read":
        body = {"seq": item["message"]["seq"]}
        done = call_server(
            "inbox", args.url, "POST", f"/v1/conversations/{conversation}/read", body
        )
        return 0 if done is not None else 2
    payload = _answer(item, args.choice)
    if payload is None:
        return 2
    path = f"/v1/conversations/{conversation}/messages/{item['id']}/answer"
    answered = call_server("inbox", args.url, "POST", path, payload)
    if answered is None:
        return 2
    print(f"answered: {answered.json()['body'].splitlines()[0]}")
    return 0


def _answer(item: dict[str, Any], choice: str) -> dict[str, Any] | None:
    controls = item["message"].get("controls")
    client_id = f"cli-{uuid.uuid4().hex}"
    if not controls:
        print("nightowl inbox: this item asks nothing; use `nightowl inbox read ID`")
        return None
    if controls.get("draft") is not None:
        if choice not in ("send", "discard"):
            print("nightowl inbox: a draft takes `send` or `discard`")
            return None
        return {"client_id": client_id, "action": choice}
    for button in controls.get("buttons") or []:
        if choice.casefold() in (str(button["value"]).casefold(), button["label"].casefold()):
            return {"client_id": client_id, "value": button["value"]}
    labels = ", ".join(b["label"] for b in controls.get("buttons") or [])
    print(f"nightowl inbox: choose one of: {labels}")
    return None


def _line(item: dict[str, Any]) -> str:
    when = ""
    if item["deadline"]:
        left = datetime.fromisoformat(item["deadline"]) - datetime.now(UTC)
        when = f" (closes in {max(0, int(left.total_seconds()))} s)"
    first = (item["message"]["body"].strip().splitlines() or [""])[0][:70]
    title = item["conversation_title"] or item["conversation_id"]
    return f"{item['id']}  {item['kind']:<13} {title[:30]:<30}  {first}{when}"
