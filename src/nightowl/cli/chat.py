"""`nightowl chat`: talk to nightowl from the terminal (channels/terminal.py does the talking)."""

from __future__ import annotations

import argparse

from nightowl.cli.client import Commands, load_settings, owner_token


def add_commands(commands: Commands) -> None:
    """Add `chat [--url URL] [--token TOKEN] [--conversation ID]`."""
    chat = commands.add_parser("chat", help="talk to nightowl from the terminal")
    chat.add_argument("--url", help="server URL (default: from settings)")
    chat.add_argument("--token", help="access token (default: NIGHTOWL_TOKEN or the owner's)")
    chat.add_argument("--conversation", help="conversation id (default: a new one)")
    chat.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Chat until the person leaves; exit with why the chat could not go on."""
    import httpx

    from nightowl.channels.terminal import ChatError, run_chat

    settings = load_settings()
    token = args.token or owner_token(settings)
    if not token:
        raise SystemExit("nightowl chat: no token; pass --token or set NIGHTOWL_TOKEN")
    url = args.url or f"http://{settings.host}:{settings.port}"
    try:
        return run_chat(url, token, args.conversation)
    except ChatError as error:
        raise SystemExit(f"nightowl chat: {error}") from None
    except httpx.TransportError as error:
        raise SystemExit(
            f"nightowl chat: cannot reach the server at {url} ({error}); start it with "
            "`nightowl serve`, or pass --url with its address"
        ) from None
