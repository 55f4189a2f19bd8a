"""`nightowl backup PATH`: one gzip'd tar archive of everything a server needs to come back.

It holds copies of the stores (databases.py), the data dir's keys (the vault key, the Web Push
key, the owner's token file) and its two folders: `homes/` (the computers' files) and
`blobs/` (snapshots of sleeping computers, attachments, large tool output), and with a shared
snapshot store the snapshots the copied store refers to (shared_snapshots.py). The stores are
copied first, then the files: a snapshot written meanwhile is an extra file, never a missing
one. The archive is written beside PATH and renamed into place when complete, readable by
its owner only, since it holds the vault key.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from nightowl import __version__
from nightowl.backup import databases, shared_snapshots
from nightowl.backup.manifest import (
    DATABASE_DIR,
    FILES_DIR,
    MANIFEST_NAME,
    BackupError,
    DatabaseKind,
    Manifest,
    Member,
)
from nightowl.config import Settings

KEY_FILES = ("secret.key", "vapid-private.pem", "owner-token")
FOLDERS = ("homes", "blobs")


@dataclass(frozen=True)
class BackupSummary:
    """What a backup wrote, for the person who asked for it."""

    path: Path
    bytes: int
    manifest: Manifest
    shared_snapshots: int = 0  # objects of the shared snapshot store in the archive
    warnings: list[str] = field(default_factory=list)


class _HashingReader:
    """Hands a file to tarfile while hashing exactly the bytes that went into the archive."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        self.digest.update(chunk)
        return chunk


def data_dir_entries(settings: Settings) -> Iterator[tuple[Path, str]]:
    """The data dir's keys and every path under its folders, with their archive names."""
    for name in KEY_FILES:
        path = settings.data_dir / name
        if path.is_file():
            yield path, f"{FILES_DIR}/{name}"
    for folder in FOLDERS:
        top = settings.data_dir / folder
        if not top.is_dir():
            continue
        yield top, f"{FILES_DIR}/{folder}"
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = Path(root) / name
                yield path, f"{FILES_DIR}/{path.relative_to(settings.data_dir)}"


def _add(tar: tarfile.TarFile, path: Path, name: str, manifest: Manifest) -> None:
    """One path into the archive; a regular file also into the manifest."""
    try:
        info = tar.gettarinfo(str(path), name)
    except FileNotFoundError:  # gone since the walk (a computer went to sleep): not needed
        return
    if info is None or not (info.isreg() or info.isdir() or info.issym()):
        return  # sockets and FIFOs are a running sandbox's, not data
    if not info.isreg():
        tar.addfile(info)
        return
    try:
        with open(path, "rb") as file:
            reader = _HashingReader(file)
            tar.addfile(info, reader)  # type: ignore[arg-type]  # read() is all tarfile uses
    except FileNotFoundError:
        return
    except OSError as error:
        raise BackupError(
            f"{path} changed while it was read ({error}); run the backup again when the "
            "computers are quiet"
        ) from None
    manifest.members[name] = Member(bytes=info.size, sha256=reader.digest.hexdigest())


def _add_manifest(tar: tarfile.TarFile, manifest: Manifest) -> None:
    raw = manifest.to_json()
    info = tarfile.TarInfo(MANIFEST_NAME)
    info.size = len(raw)
    info.mtime = int(datetime.now(UTC).timestamp())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(raw))


def create_backup(settings: Settings, path: Path) -> BackupSummary:
    """Write the archive to `path` (which must not exist yet)."""
    if path.exists():
        raise BackupError(f"{path} exists; give a new file name (a backup never overwrites)")
    kind: DatabaseKind = "postgresql" if settings.uses_postgres else "sqlite"
    shared = shared_snapshots.store_for(settings)
    manifest = Manifest(
        nightowl_version=__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        database=kind,
        app_store_revision=databases.app_store_revision(settings),
        vault_key="environment" if settings.secret_key else "in-backup",
        snapshot_store=settings.snapshot_store or None,
    )
    warnings: list[str] = []
    fetched = 0
    partial = path.with_name(f".{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="nightowl-backup-") as staging,
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w:gz", compresslevel=1) as tar,
        ):
            copies, references = _store_copies(settings, Path(staging), manifest)
            for name, copy in copies:
                _add(tar, copy, f"{DATABASE_DIR}/{name}", manifest)
            if shared is not None:
                folder = Path(staging) / shared_snapshots.SHARED_DIR
                for name, file in shared_snapshots.fetch(shared, references, folder, warnings):
                    _add(tar, file, f"{shared_snapshots.SHARED_DIR}/{name}", manifest)
                    file.unlink()  # one snapshot on the staging disk at a time
                    fetched += 1
            for source, name in data_dir_entries(settings):
                _add(tar, source, name, manifest)
            _add_manifest(tar, manifest)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupSummary(
        path=path,
        bytes=path.stat().st_size,
        manifest=manifest,
        shared_snapshots=fetched,
        warnings=warnings,
    )


def _store_copies(
    settings: Settings, staging: Path, manifest: Manifest
) -> tuple[list[tuple[str, Path]], list[str]]:
    """Consistent copies of the stores in `staging`, by their names in the archive, and the
    computers' snapshot references those copies hold."""
    with_computers = manifest.app_store_revision is not None  # a migrated store has the table
    if settings.uses_postgres:
        dump = staging / databases.PG_DUMP_NAME
        references = databases.dump_postgres(
            settings.store_url, dump, with_computers=with_computers
        )
        return [(databases.PG_DUMP_NAME, dump)], references
    copies: list[tuple[str, Path]] = []
    references = []
    for name, source in databases.sqlite_files(settings).items():
        if name == "durable.sqlite" and not source.exists():
            continue  # no server has run on this store yet: no durable history to keep
        copy = staging / name
        databases.copy_sqlite(source, copy)
        copies.append((name, copy))
        if name == "nightowl.db" and with_computers:
            references = databases.sqlite_snapshot_references(copy)
    return copies, references
