"""The owner's first access token, kept in a 0600 file: printed when it is made, shown again by
`nightowl token`, never written to the server's log after that."""

from __future__ import annotations

import os
from pathlib import Path

from nightowl.store.database import Database
from nightowl.store.users import create_token, ensure_owner, token_is_live


def ensure_owner_token(database: Database, token_file: Path) -> tuple[str, bool]:
    """The owner's token from `token_file` while it still works, or a new one; True when new."""
    if token_file.exists():
        secret = token_file.read_text().strip()
        with database.read() as session:
            if secret and token_is_live(session, secret):
                return secret, False
    with database.write() as session:
        owner = ensure_owner(session)
        _, secret = create_token(session, owner.id, "owner (first start)")
    token_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = token_file.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    os.replace(temporary, token_file)
    return secret, True


def owner_token(database: Database, token_file: Path) -> str | None:
    """The owner's token kept in `token_file`, when it still works."""
    if not token_file.exists():
        return None
    secret = token_file.read_text().strip()
    with database.read() as session:
        return secret if secret and token_is_live(session, secret) else None
