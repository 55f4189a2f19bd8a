"""What a backup archive holds: its manifest (the archive's last member, `manifest.json`).

The manifest names the archive format, the nightowl that wrote it, the kind of database, the
app store's migration, where the vault key was, the shared snapshot store its computers'
snapshots came from (if any), and every regular file with its size and SHA-256, so a restore
can refuse a damaged or foreign archive before it touches anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

FORMAT = 2  # 2: the shared snapshot store and its snapshots (shared_snapshots.py)
READABLE_FORMATS = (1, 2)
MANIFEST_NAME = "manifest.json"
DATABASE_DIR = "database"  # the stores' copies: nightowl.db + durable.sqlite, or nightowl.pgdump
FILES_DIR = "files"  # the data dir's keys and folders, as they are laid out there

DatabaseKind = Literal["sqlite", "postgresql"]
VaultKeyPlace = Literal["in-backup", "environment"]


class BackupError(Exception):
    """A backup or restore cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class Member:
    """One regular file of the archive: how long it is and its SHA-256 (hex)."""

    bytes: int
    sha256: str


@dataclass
class Manifest:
    """The archive's table of contents (see the module docstring)."""

    nightowl_version: str
    created_at: str
    database: DatabaseKind
    app_store_revision: str | None
    vault_key: VaultKeyPlace
    members: dict[str, Member] = field(default_factory=dict)
    snapshot_store: str | None = None  # s3://bucket/prefix the shared snapshots came from
    format: int = FORMAT

    def to_json(self) -> bytes:
        """The manifest as the archive stores it."""
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        """Read a manifest; BackupError when it is not one this nightowl can read."""
        try:
            data = json.loads(raw)
            if data.get("format") not in READABLE_FORMATS:
                raise BackupError(
                    f"the archive's format is {data.get('format')!r}; this nightowl reads formats "
                    f"{' and '.join(map(str, READABLE_FORMATS))}: restore it with the nightowl "
                    "version that wrote it "
                    f"({data.get('nightowl_version', 'unknown')})"
                )
            members = {name: Member(**member) for name, member in data.pop("members").items()}
            return cls(**data, members=members)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise BackupError(f"the archive's manifest is unreadable ({error})") from None
