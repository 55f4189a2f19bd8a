"""`nightowl hooks create|list|delete`: inbound webhooks (on the app store directly)."""

from __future__ import annotations

import argparse

from nightowl.cli.client import Commands, load_settings, open_store, print_error
from nightowl.store.errors import StoreError


def add_commands(commands: Commands) -> None:
    """Add `hooks` and its subcommands."""
    hooks = commands.add_parser("hooks", help="create, list or delete inbound webhooks")
    hooks_commands = hooks.add_subparsers(dest="hooks_command", required=True)
    hooks_create = hooks_commands.add_parser("create", help="a new webhook (secret shown once)")
    hooks_create.add_argument("name")
    hooks_commands.add_parser("list", help="the owner's webhooks")
    hooks_delete = hooks_commands.add_parser("delete", help="delete a webhook by id")
    hooks_delete.add_argument("id")
    hooks.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one `hooks` subcommand; 2 with the reason when the store refused."""
    from nightowl.store.users import ensure_owner
    from nightowl.store.webhooks import create_hook, delete_hook, list_hooks

    settings = load_settings()
    try:
        with open_store(settings) as database, database.write() as session:
            owner = ensure_owner(session)
            if args.hooks_command == "create":
                info, secret = create_hook(session, owner.id, args.name)
                print(f"created webhook {info.id} ({info.name})")
                print(f"  POST http://{settings.host}:{settings.port}/v1/hooks/{info.id}")
                print(f"  secret (shown once): {secret}")
                print("  sign '<timestamp>.<body>' with HMAC-SHA256; see docs/webhooks.md")
            elif args.hooks_command == "list":
                hooks = list_hooks(session, owner.id)
                for hook in hooks:
                    print(f"{hook.id}  {hook.name:<24} conversation {hook.conversation_id}")
                if not hooks:
                    print("no webhooks; `nightowl hooks create NAME` makes one")
            else:
                delete_hook(session, owner.id, args.id)
                print(f"deleted {args.id}")
    except StoreError as error:
        return print_error("hooks", error)
    return 0
