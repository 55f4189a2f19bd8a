"""How a command reaches nightowl: its settings, the app store directly, or the running server
as the owner; and how a refused command says why."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import ValidationError

from nightowl.config import Settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from nightowl.store.database import Database

# argparse's registry of subcommands, which each command group adds its parsers to (argparse
# gives the type no public name).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def load_settings() -> Settings:
    """The settings, or exit naming each bad NIGHTOWL_ variable."""
    try:
        return Settings()
    except ValidationError as error:
        problems = "; ".join(
            f"NIGHTOWL_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in error.errors()
        )
        raise SystemExit(f"nightowl: bad configuration: {problems}") from None


@contextmanager
def open_store(settings: Settings) -> Iterator[Database]:
    """The migrated app store for a command that works on it directly."""
    from nightowl.store.database import Database
    from nightowl.store.migrate import upgrade

    database = Database(settings.store_url)
    upgrade(database)
    try:
        yield database
    finally:
        database.dispose()


@contextmanager
def owner_session(settings: Settings) -> Iterator[tuple[Session, str]]:
    """One transaction on the migrated app store, opened directly, and the owner's user id
    (the owner made on first use): what a command that reports to the owner reads."""
    from nightowl.store.users import ensure_owner

    with open_store(settings) as database, database.write() as session:
        yield session, ensure_owner(session).id


def owner_token(settings: Settings) -> str:
    """NIGHTOWL_TOKEN, or the owner's token the server wrote on first start ("" if neither)."""
    token = os.environ.get("NIGHTOWL_TOKEN", "")
    if not token and settings.owner_token_file.exists():
        token = settings.owner_token_file.read_text().strip()
    return token


def print_error(command: str, error: object) -> int:
    """Say on stderr why `nightowl COMMAND` failed; 2, the exit code of a refused command."""
    print(f"nightowl {command}: {error}", file=sys.stderr)
    return 2


def call_server(
    name: str, url: str | None, method: str, path: str, body: Any = None, query: Any = None
) -> Any:
    """One request to the running server as the owner: the response, or None once it has
    printed why it failed (the server cannot be reached, or refused with its reason)."""
    import httpx

    settings = load_settings()
    base = url or f"http://{settings.host}:{settings.port}"
    headers = {"Authorization": f"Bearer {owner_token(settings)}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            response = http.request(method, path, json=body, params=query)
    except httpx.TransportError as error:
        print_error(name, f"cannot reach the server at {base} ({error})")
        return None
    if response.status_code >= 400:
        print_error(name, response.json()["error"]["message"])
        return None
    return response


def call_and_say(
    name: str, url: str | None, method: str, path: str, done: str, body: Any = None
) -> int:
    """One request to the server (see `call_server`) that answers nothing to show: print `done`
    when it worked. The command's exit code: 0, or 2 once it has printed why it failed."""
    if call_server(name, url, method, path, body) is None:
        return 2
    print(done)
    return 0


@dataclass(frozen=True)
class Server:
    """The running server as one command (`nightowl NAME ...`) reaches it."""

    name: str
    url: str | None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The response, or None once it has printed why it failed (see `call_server`)."""
        return call_server(self.name, self.url, method, path, body)

    def call(self, method: str, path: str, done: str, body: Any = None) -> int:
        """A request that answers nothing to show: the exit code (see `call_and_say`)."""
        return call_and_say(self.name, self.url, method, path, done, body)
