"""`nightowl serve [--role all|api|worker]` and `nightowl computer-host`: run a server."""

from __future__ import annotations

import argparse
import os

from nightowl.cli.client import Commands, load_settings, open_store
from nightowl.config import Settings

# How long an idle HTTP connection stays open (seconds): above common proxies' and clients'
# idle limits (nginx 60 s), so the server is not the one closing a connection being reused.
KEEP_ALIVE_S = 75


def add_commands(commands: Commands) -> None:
    """Add `serve` and `computer-host`."""
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument(
        "--role",
        choices=["all", "api", "worker"],
        help="api: requests only; worker: turns and background work; all (default): both",
    )
    serve.set_defaults(run=run_serve)
    commands.add_parser(
        "computer-host", help="run the users' computers for the workers (a computer tier)"
    ).set_defaults(run=run_computer_host)


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


def _banner(settings: Settings, new_token: str | None) -> str:
    """What `serve` prints before it starts: where, and on first start the sign-in link on a
    line of its own (the one thing a new user must find among the log lines)."""
    url = f"http://{settings.host}:{settings.port}"
    head = (
        f"\n  nightowl is starting at {url}\n"
        f"  data: {settings.data_dir}   model: {settings.model}\n"
    )
    if new_token is None:
        # The token is printed once, when it is made: after that, output that lands in a log
        # holds no credential.
        return head + "  `nightowl token` shows the owner's sign-in link\n"
    return (
        f"{head}\n"
        "  Open this link to sign in:\n\n"
        f"    {url}/#token={new_token}\n\n"
        f"  owner token: {new_token}\n"
        f"  (kept in {settings.owner_token_file}; shown only now, `nightowl token` shows it "
        "again)\n"
    )


def run_serve(args: argparse.Namespace) -> int:
    """Migrate the store, make the owner's token on first start, and serve until stopped."""
    import uvicorn

    from nightowl.app import build_app
    from nightowl.logs import configure_logging
    from nightowl.store.owner import ensure_owner_token

    if args.role:
        os.environ["NIGHTOWL_ROLE"] = args.role  # the flag wins over the environment
    settings = load_settings()
    _port_is_free(settings.host, settings.port)
    configure_logging(settings.log_level, settings.log_format)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_store(settings) as database:
        token, new = ensure_owner_token(database, settings.owner_token_file)
    print(_banner(settings, token if new else None), flush=True)
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


def run_computer_host(_args: argparse.Namespace) -> int:
    """Serve the users' computers to the workers (a computer tier of its own)."""
    import uvicorn

    from nightowl.computer.computers import Computers
    from nightowl.computer.host import build_host_app
    from nightowl.logs import configure_logging
    from nightowl.services import computer_settings, snapshot_redactor, snapshot_store

    settings = load_settings()
    if not settings.computer_host_url or len(settings.computer_token) < 16:
        raise SystemExit(
            "nightowl computer-host: set NIGHTOWL_COMPUTER_HOST_URL (this host's address as "
            "the workers reach it) and NIGHTOWL_COMPUTER_TOKEN (16 characters or more, the "
            "same on every worker)"
        )
    _port_is_free(settings.host, settings.port)
    configure_logging(settings.log_level, settings.log_format)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_store(settings) as database:
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
