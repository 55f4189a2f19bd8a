"""Identifiers for stored rows: a short prefix that says what it is, then random hex."""

import hashlib
import secrets


def new_id(prefix: str) -> str:
    """A fresh, unguessable id such as `conv_3f9a…`."""
    return f"{prefix}_{secrets.token_hex(12)}"


def keyed_id(prefix: str, key: str) -> str:
    """The same id every time for the same `key` (a step that runs again finds its row)."""
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:24]}"
