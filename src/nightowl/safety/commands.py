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
from nightowl.safety.vault import VaultKeyError, load_key, set_allowed_hosts, set_secret
from nightowl.store.audit import audit_log
from nightowl.store.errors import StoreError
from nightowl.store.secrets import drop_secret, secrets_of

Store = Callable[[Settings], Any]  # the CLI's migrated-store context manager


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {name} (not echoed): ")
    return sys.stdin.read().rstrip("\n")


def _hosts(hosts: list[str]) -> str:
    return ", ".join(hosts) or "none (every use over the network waits for your approval)"


def run_secrets(args: argparse.Namespace, settings: Settings, store: Store) -> int:
    """Set, list or delete the owner's secrets."""
    from nightowl.store.users import ensure_owner

    try:
        key = load_key(settings.data_dir, settings.secret_key)
        value = _read_value(args.name) if args.secrets_command == "set" else ""
        with store(settings) as database, database.write() as session:
            owner = ensure_owner(session)
            if args.secrets_command == "set":
                new = set_secret(session, key, owner.id, args.name, value, args.allow_host)
                print(
                    f"{'stored' if new else 'replaced'} secret {args.name}; "
                    f"tools use it as {{{{secret:{args.name}}}}}"
                )
            elif args.secrets_command == "hosts":
                info = set_allowed_hosts(session, owner.id, args.name, args.hosts)
                print(f"secret {info.name} may go to: {_hosts(info.allowed_hosts)}")
            elif args.secrets_command == "list":
                infos = secrets_of(session, owner.id)
                for info in infos:
                    print(
                        f"{info.name:<32} updated {info.updated_at:%Y-%m-%d %H:%M} UTC  "
                        f"hosts: {_hosts(info.allowed_hosts)}"
                    )
                if not infos:
                    print("no secrets; `nightowl secrets set NAME` stores one (value on stdin)")
            else:
                drop_secret(session, owner.id, args.name)
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
    put = verbs.add_parser("set", help="store a secret; its value is read from stdin")
    put.add_argument("name")
    put.add_argument(
        "--allow-host",
        action="extend",
        nargs="+",
        default=None,
        metavar="HOST",
        help="a host the secret may be sent to without asking you (api.example.com, "
        "*.example.com, http://host for plain http); left out, a replaced secret keeps its "
        "hosts",
    )
    hosts = verbs.add_parser("hosts", help="replace the hosts a secret may be sent to")
    hosts.add_argument("name")
    hosts.add_argument("hosts", nargs="*", metavar="HOST", help="none: it goes nowhere unasked")
    verbs.add_parser("list", help="the names of the secrets and their allowed hosts")
    verbs.add_parser("delete", help="delete a secret").add_argument("name")
    secrets.set_defaults(run=lambda args: run_secrets(args, settings(), store))

    audit = commands.add_parser("audit", help="reviews, approvals, denials and sends")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--conversation", default=None, help="only this conversation")
    audit.set_defaults(run=lambda args: run_audit(args, settings(), store))
