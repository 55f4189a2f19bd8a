"""The owner's first access token, kept in a 0600 file so `make run` can print it."""

from __future__ import annotations

import os
from pathlib import Path

from nightowl.store.database import Database
from nightowl.store.users import create_token, ensure_owner, token_is_live


def ensure_owner_token(database: Database, token_file: Path) -> str:
    """The owner's token from `token_file` while it still works; otherwise a new one."""
    if token_file.exists():
        secret = token_file.read_text().strip()
        with database.read() as session:
            if secret and token_is_live(session, secret):
                return secret
    with database.write() as session:
        owner = ensure_owner(session)
        _, secret = create_token(session, owner.id, "owner (first start)")
    token_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = token_file.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    os.replace(temporary, token_file)
    return secret
