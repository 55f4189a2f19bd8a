"""`nightowl token [show|create|list|revoke]`: the owner's sign-in link and access tokens (on
the app store directly)."""

from __future__ import annotations

import argparse

from nightowl.cli.client import Commands, load_settings, open_store, print_error
from nightowl.store.database import Database
from nightowl.store.errors import StoreError


def add_commands(commands: Commands) -> None:
    """Add `token` and its subcommands (`show` when none is given)."""
    token = commands.add_parser(
        "token", help="show the owner's sign-in link, or create, list or revoke access tokens"
    )
    token_commands = token.add_subparsers(dest="token_command")
    token_commands.add_parser("show", help="the owner's token and sign-in link (the default)")
    create = token_commands.add_parser("create", help="make a new token (shown once)")
    create.add_argument("--user", help="user name (default: the owner)")
    create.add_argument("--new-user", action="store_true", help="add --user as a member first")
    create.add_argument("--name", default="cli", help="a label for the token")
    token_commands.add_parser("list", help="list tokens (never their secrets)")
    revoke = token_commands.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    token.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one `token` subcommand; 2 with the reason when the store refused."""
    try:
        with open_store(load_settings()) as database:
            _run_on(args, database)
    except StoreError as error:
        return print_error("token", error)
    return 0


def _run_on(args: argparse.Namespace, database: Database) -> None:
    from nightowl.store.users import (
        create_token,
        create_user,
        ensure_owner,
        find_user,
        list_tokens,
        revoke_token,
    )

    if args.token_command in (None, "show"):
        from nightowl.store.owner import owner_token

        settings = load_settings()
        token = owner_token(database, settings.owner_token_file)
        if token is None:
            raise StoreError(
                "no owner token is kept (it was revoked, or the server never started); "
                "`nightowl serve` makes one, `nightowl token create` makes another"
            )
        url = f"http://{settings.host}:{settings.port}"
        print(f"open {url}/#token={token}\nowner token: {token}")
    elif args.token_command == "create":
        with database.write() as session:
            if args.user is None:
                user = ensure_owner(session)
            else:
                try:
                    user = find_user(session, args.user)
                except StoreError:
                    if not args.new_user:
                        raise
                    user = create_user(session, args.user, "member")
            info, secret = create_token(session, user.id, args.name)
        print(f"created token {info.id} for {info.user_name}: {secret}")
        print("it is shown only now; store it somewhere safe")
    elif args.token_command == "list":
        with database.read() as session:
            tokens = list_tokens(session)
        for t in tokens:
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            print(f"{t.id}  {t.user_name:<12} {t.name:<24} {state}")
        if not tokens:
            print("no tokens yet; `nightowl token create` makes one")
    else:
        with database.write() as session:
            info = revoke_token(session, args.id)
        print(f"revoked {info.id} ({info.user_name}, {info.name})")
