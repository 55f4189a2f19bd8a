"""`nightowl audit [--limit N] [--conversation ID]`: reviews, approvals, denials and sends, on
the app store directly."""

from __future__ import annotations

import argparse

from nightowl.cli.client import Commands, load_settings, owner_session, print_error
from nightowl.store.audit import audit_log


def add_commands(commands: Commands) -> None:
    """Add `audit`."""
    audit = commands.add_parser("audit", help="reviews, approvals, denials and sends")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--conversation", default=None, help="only this conversation")
    audit.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the audit log, newest first."""
    settings = load_settings()
    if not 1 <= args.limit <= 500:
        return print_error("audit", "--limit must be between 1 and 500")
    with owner_session(settings) as (session, owner_id):
        entries = audit_log(session, owner_id, conversation_id=args.conversation, limit=args.limit)
    for entry in entries:
        print(
            f"{entry.at:%Y-%m-%d %H:%M:%S}  {entry.kind:<18} {entry.decision:<6} "
            f"{entry.tool:<16} turn {entry.turn_id}  {entry.reason}"
        )
    if not entries:
        print("the audit log is empty")
    return 0
