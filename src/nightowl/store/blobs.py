"""The blob store: large outputs and attached files live as files named by their SHA-256,
referenced from history and messages as `blob:<hex>`."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nightowl.store.errors import NotFound

PREFIX = "blob:"


def _put(blob_dir: Path, data: bytes, suffix: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = blob_dir / digest[:2] / f"{digest}{suffix}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    return PREFIX + digest


def _path(blob_dir: Path, reference: str, suffix: str) -> Path:
    digest = reference.removeprefix(PREFIX)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise NotFound(f"{reference!r} is not a blob reference (they look like blob:<64 hex>)")
    path = blob_dir / digest[:2] / f"{digest}{suffix}"
    if not path.is_file():
        raise NotFound(f"nothing stored under {reference}")
    return path


def put_text(blob_dir: Path, text: str) -> str:
    """Store `text` (atomically; identical text is stored once) and return its reference."""
    return _put(blob_dir, text.encode(), ".txt")


def get_text(blob_dir: Path, reference: str) -> str:
    """The text stored under a reference."""
    return _path(blob_dir, reference, ".txt").read_text()


def put_file(blob_dir: Path, source: Path) -> str:
    """Copy a file's bytes into the store and return its reference."""
    return _put(blob_dir, source.read_bytes(), ".bin")


def put_bytes(blob_dir: Path, data: bytes) -> str:
    """Store a file's bytes and return its reference."""
    return _put(blob_dir, data, ".bin")


def file_path(blob_dir: Path, reference: str) -> Path:
    """Where a stored file's bytes are."""
    return _path(blob_dir, reference, ".bin")
