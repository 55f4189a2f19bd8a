"""Identifiers for stored rows: a short prefix that says what it is, then random hex."""

import secrets


def new_id(prefix: str) -> str:
    """A fresh, unguessable id such as `conv_3f9a…`."""
    return f"{prefix}_{secrets.token_hex(12)}"
