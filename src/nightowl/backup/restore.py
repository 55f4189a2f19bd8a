"""`nightowl restore PATH`: check an archive whole, then put the stores and files back.

Nothing is written until the archive has passed every check: its manifest is one this nightowl
reads, its database kind is the configured one, its app store is not from a newer nightowl,
every file's SHA-256 matches the manifest and no listed file is missing, the target store
is empty (or `--force` was given), and shared snapshots have a configured store to go to (they
are uploaded first, shared_snapshots.py, before anything local is replaced). Servers must be
stopped first: a restore replaces the stores under them. Extraction goes through tarfile's
"tar" filter (no absolute paths, no links out of the target, no setuid bits) and keeps numeric
owners, so each computer's home stays its own sandbox uid's.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nightowl.backup import databases, shared_snapshots
from nightowl.backup.create import FOLDERS, KEY_FILES
from nightowl.backup.manifest import DATABASE_DIR, FILES_DIR, MANIFEST_NAME, BackupError, Manifest
from nightowl.config import Settings
from nightowl.store.migrate import newest_revision


@dataclass
class RestoreSummary:
    """What a restore put back, and what the person must still do."""

    manifest: Manifest
    warnings: list[str] = field(default_factory=list)
    shared_snapshots: int = 0  # uploaded into the configured shared snapshot store


def read_checked(path: Path) -> Manifest:
    """The archive's manifest, once every file in it matched its checksum."""
    if not path.is_file():
        raise BackupError(f"{path} is not a file")
    hashes: dict[str, tuple[int, str]] = {}
    raw_manifest: bytes | None = None
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for member in tar:
                if not member.isreg():
                    continue
                file = tar.extractfile(member)
                assert file is not None  # a regular member always has its bytes
                if member.name == MANIFEST_NAME:
                    raw_manifest = file.read()
                    continue
                digest = hashlib.sha256()
                while chunk := file.read(1 << 20):
                    digest.update(chunk)
                hashes[member.name] = (member.size, digest.hexdigest())
    except (tarfile.TarError, OSError, EOFError) as error:
        raise BackupError(
            f"{path} is not a complete nightowl backup ({error}); use another backup"
        ) from None
    if raw_manifest is None:
        raise BackupError(f"{path} has no {MANIFEST_NAME}: it is not a nightowl backup")
    manifest = Manifest.from_json(raw_manifest)
    for name, listed in manifest.members.items():
        found = hashes.pop(name, None)
        if found is None:
            raise BackupError(f"the archive lacks {name}, which its manifest lists: use another")
        if found != (listed.bytes, listed.sha256):
            raise BackupError(
                f"{name} in the archive does not match its checksum: the file is damaged; "
                "use another backup"
            )
    if hashes:
        raise BackupError(f"the archive holds files its manifest does not list: {sorted(hashes)}")
    return manifest


def _check_fits(manifest: Manifest, settings: Settings) -> None:
    kind = "postgresql" if settings.uses_postgres else "sqlite"
    if manifest.database != kind:
        setting = (
            "unset NIGHTOWL_DATABASE_URL"
            if manifest.database == "sqlite"
            else "set NIGHTOWL_DATABASE_URL to an empty PostgreSQL database"
        )
        raise BackupError(
            f"the backup holds a {manifest.database} store and this server is set up for "
            f"{kind}; {setting} and run restore again (a store does not move between kinds)"
        )
    revision = manifest.app_store_revision
    if revision is not None and revision > newest_revision():
        raise BackupError(
            f"the backup was made by nightowl {manifest.nightowl_version}, whose store is at "
            f"migration {revision}; this nightowl knows up to {newest_revision()}: install "
            f"nightowl {manifest.nightowl_version} or newer and run restore again"
        )
    shared_snapshots.check_restorable(manifest, settings)


def _data_dir_is_empty(settings: Settings) -> bool:
    keys = any((settings.data_dir / name).exists() for name in KEY_FILES)
    folders = any(
        (settings.data_dir / folder).is_dir() and any((settings.data_dir / folder).iterdir())
        for folder in FOLDERS
    )
    return not keys and not folders


def _store_is_empty(settings: Settings) -> bool:
    if settings.uses_postgres:
        store_empty = databases.postgres_is_empty(settings.store_url)
    else:
        store_empty = databases.sqlite_is_empty(settings)
    return store_empty and _data_dir_is_empty(settings)


def _clear(settings: Settings) -> None:
    """What --force replaces: the stores, the keys and the folders."""
    if settings.uses_postgres:
        databases.clear_postgres(settings.store_url)
    else:
        databases.remove_sqlite(settings)
    for name in KEY_FILES:
        (settings.data_dir / name).unlink(missing_ok=True)
    for folder in FOLDERS:
        shutil.rmtree(settings.data_dir / folder, ignore_errors=True)


def restore_backup(settings: Settings, path: Path, *, force: bool = False) -> RestoreSummary:
    """Check the archive, then restore it into the configured stores and data dir."""
    manifest = read_checked(path)
    _check_fits(manifest, settings)
    if not force and not _store_is_empty(settings):
        where = "the PostgreSQL database" if settings.uses_postgres else str(settings.data_dir)
        raise BackupError(
            f"{where} already holds a nightowl store; restore into an empty one, or pass "
            "--force to replace it (stop every server first)"
        )
    summary = RestoreSummary(manifest=manifest)
    if manifest.vault_key == "environment" and not settings.secret_key:
        summary.warnings.append(
            "the backed-up server took its vault key from NIGHTOWL_SECRET_KEY: set the same key "
            "before starting, or the stored secrets cannot be opened"
        )
    elif manifest.vault_key == "in-backup" and settings.secret_key:
        summary.warnings.append(
            "NIGHTOWL_SECRET_KEY is set and overrides the vault key restored from the backup; "
            "unset it unless it is the same key"
        )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".restore-", dir=settings.data_dir) as staging:
        unpacked = Path(staging)
        with tarfile.open(path, mode="r:gz") as tar:
            tar.extractall(unpacked, numeric_owner=True, filter="tar")
        summary.shared_snapshots = shared_snapshots.put_back(
            settings, unpacked / shared_snapshots.SHARED_DIR
        )
        if force:
            _clear(settings)
        _put_stores(settings, unpacked / DATABASE_DIR)
        files = unpacked / FILES_DIR
        if files.is_dir():
            for entry in files.iterdir():
                target = settings.data_dir / entry.name
                if target.is_dir():  # empty (checked above) or cleared by --force
                    shutil.rmtree(target)
                shutil.move(entry, target)
    return summary


def _put_stores(settings: Settings, copies: Path) -> None:
    if settings.uses_postgres:
        databases.restore_postgres(settings.store_url, copies / databases.PG_DUMP_NAME)
        return
    for name, target in databases.sqlite_files(settings).items():
        if (copies / name).exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(copies / name, target)
