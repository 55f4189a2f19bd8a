"""`nightowl secrets set|list|delete` and `nightowl audit`: on the app store directly.

A secret's value is read from standard input (never from the command line, where other users
could see it in the process list) and is never printed.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from nightowl.config import Settings
from nightowl.safety.audit import audit_log
from nightowl.safety.vault import (
    VaultKeyError,
    delete_secret,
    load_key,
    secret_names_of,
    set_secret,
)
from nightowl.store.errors import StoreError

Store = Callable[[Settings], Any]  # the CLI's migrated-store context manager


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {name} (not echoed): ")
    return sys.stdin.read().rstrip("\n")


def run_secrets(args: argparse.Namespace, settings: Settings, store: Store) -> int:
    """Set, list or delete the owner's secrets."""
    from nightowl.store.users import ensure_owner

    try:
        key = load_key(settings.data_dir, settings.secret_key)
        value = _read_value(args.name) if args.secrets_command == "set" else ""
        with store(settings) as database, database.write() as session:
            owner = ensure_owner(session)
            if args.secrets_command == "set":
                new = set_secret(session, key, owner.id, args.name, value)
                print(
                    f"{'stored' if new else 'replaced'} secret {args.name}; "
                    f"tools use it as {{{{secret:{args.name}}}}}"
                )
            elif args.secrets_command == "list":
                names = secret_names_of(session, owner.id)
                for name, updated in names:
                    print(f"{name:<32} updated {updated:%Y-%m-%d %H:%M} UTC")
                if not names:
                    print("no secrets; `nightowl secrets set NAME` stores one (value on stdin)")
            else:
                delete_secret(session, owner.id, args.name)
                print(f"deleted secret {args.name}")
    except (StoreError, VaultKeyError) as error:
        print(f"nightowl secrets: {error}", file=sys.stderr)
        return 2
    return 0


def run_audit(args: argparse.Namespace, settings: Settings, store: Store) -> int:
    """Print the audit log, newest first."""
    from nightowl.store.users import ensure_owner

    if not 1 <= args.limit <= 500:
        print("nightowl audit: --limit must be between 1 and 500", file=sys.stderr)
        return 2
    with store(settings) as database, database.write() as session:
        owner = ensure_owner(session)
        entries = audit_log(session, owner.id, conversation_id=args.conversation, limit=args.limit)
    for entry in entries:
        print(
            f"{entry.at:%Y-%m-%d %H:%M:%S}  {entry.kind:<18} {entry.decision:<6} "
            f"{entry.tool:<16} turn {entry.turn_id}  {entry.reason}"
        )
    if not entries:
        print("the audit log is empty")
    return 0


def add_commands(commands: Any, settings: Callable[[], Settings], store: Store) -> None:
    """Add `secrets` and `audit` to the CLI's subcommands."""
    secrets = commands.add_parser("secrets", help="the secrets vault (values are never printed)")
    verbs = secrets.add_subparsers(dest="secrets_command", required=True)
    verbs.add_parser("set", help="store a secret; its value is read from stdin").add_argument(
        "name"
    )
    verbs.add_parser("list", help="the names of the secrets")
    verbs.add_parser("delete", help="delete a secret").add_argument("name")
    secrets.set_defaults(run=lambda args: run_secrets(args, settings(), store))

    audit = commands.add_parser("audit", help="reviews, approvals, denials and sends")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--conversation", default=None, help="only this conversation")
    audit.set_defaults(run=lambda args: run_audit(args, settings(), store))
