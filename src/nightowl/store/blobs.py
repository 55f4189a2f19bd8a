"""The blob store: large outputs live as files named by their SHA-256, referenced from history."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nightowl.store.errors import NotFound

PREFIX = "blob:"


def put_text(blob_dir: Path, text: str) -> str:
    """Store `text` (atomically; identical text is stored once) and return its reference."""
    data = text.encode()
    digest = hashlib.sha256(data).hexdigest()
    path = blob_dir / digest[:2] / f"{digest}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    return PREFIX + digest


def get_text(blob_dir: Path, reference: str) -> str:
    """The text stored under a reference."""
    digest = reference.removeprefix(PREFIX)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise NotFound(f"{reference!r} is not a blob reference (they look like blob:<64 hex>)")
    path = blob_dir / digest[:2] / f"{digest}.txt"
    if not path.is_file():
        raise NotFound(f"no stored output {reference}")
    return path.read_text()
