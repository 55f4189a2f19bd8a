"""The computers' snapshots in a shared store (`NIGHTOWL_SNAPSHOT_STORE=s3://…`): what a backup
keeps of them, and how a restore puts them back.

With a computer tier, a sleeping computer's home lives as an object in the bucket; the hosts'
own folders hold snapshots only as a cache, and the worker's data dir may hold none. So a
backup keeps the objects its copy of the store refers to (each computer's last snapshot),
under `shared-snapshots/` by their object names. Names are the content's SHA-256
(`<sha256>.tar.zst`): a download is checked against its name, and a restore refuses a member
whose checksum in the manifest is not its name. A restore uploads them into the configured
store before it puts the database back, so no restored row refers to a missing snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from nightowl.backup.manifest import BackupError, Manifest
from nightowl.computer.blob_store import S3SnapshotStore, SnapshotMissing
from nightowl.computer.errors import SandboxError
from nightowl.computer.snapshots import PREFIX, SUFFIX
from nightowl.config import Settings

SHARED_DIR = "shared-snapshots"
_NAME = re.compile(rf"([0-9a-f]{{64}}){re.escape(SUFFIX)}")
_SET_THE_STORE = (
    "set NIGHTOWL_SNAPSHOT_STORE (and NIGHTOWL_SNAPSHOT_STORE_ENDPOINT for an S3-compatible "
    "server, with the AWS_* credentials) as the computer hosts have them"
)


def store_for(settings: Settings) -> S3SnapshotStore | None:
    """The configured shared store (None: snapshots live in the data dir's `blobs/`), refusing
    a backup that would miss a computer tier's snapshots."""
    if not settings.snapshot_store:
        if settings.computer_host_list:
            raise BackupError(
                "the computers run on a computer tier, whose snapshots live in the shared "
                f"store, and NIGHTOWL_SNAPSHOT_STORE is not set: {_SET_THE_STORE}, and run "
                "the backup again"
            )
        return None
    from nightowl.services import snapshot_store

    try:
        return snapshot_store(settings)
    except ValueError as error:  # not an s3:// address
        raise BackupError(f"NIGHTOWL_SNAPSHOT_STORE: {error}") from None


def fetch(
    store: S3SnapshotStore, references: list[str], folder: Path, warnings: list[str]
) -> Iterator[tuple[str, Path]]:
    """Download each referenced snapshot into `folder`: (object name, file), one at a time
    (the caller archives the file and may delete it before the next). A snapshot the store
    lacks is a warning (that computer could not wake from it either), not a failed backup."""
    folder.mkdir(parents=True, exist_ok=True)
    for reference in sorted(set(references)):
        digest = reference.removeprefix(PREFIX)
        name = f"{digest}{SUFFIX}"
        if _NAME.fullmatch(name) is None:
            warnings.append(f"a computer refers to {reference!r}, which is not a snapshot")
            continue
        target = folder / name
        try:
            store.download(name, target, digest)
        except SnapshotMissing:
            warnings.append(
                f"the shared store has no snapshot {name}, which a computer refers to: that "
                "computer's files are not in the backup"
            )
            continue
        except SandboxError as error:
            raise BackupError(f"{error}; check the shared store and run the backup again") from None
        yield name, target


def archived(manifest: Manifest) -> list[str]:
    """The object names of the shared snapshots an archive holds."""
    return sorted(
        name.removeprefix(f"{SHARED_DIR}/")
        for name in manifest.members
        if name.startswith(f"{SHARED_DIR}/")
    )


def check_restorable(manifest: Manifest, settings: Settings) -> None:
    """Refuse, before anything is written, shared snapshots with no store to put them in, or
    one whose content is not what its name says."""
    names = archived(manifest)
    if not names:
        return
    for name in names:
        found = _NAME.fullmatch(name)
        member = manifest.members[f"{SHARED_DIR}/{name}"]
        if found is None or found.group(1) != member.sha256:
            raise BackupError(
                f"{SHARED_DIR}/{name} in the archive is not the snapshot its name says: the "
                "archive is damaged; use another backup"
            )
    if not settings.snapshot_store:
        raise BackupError(
            f"the backup holds {len(names)} computer snapshot(s) from the shared store "
            f"{manifest.snapshot_store or ''}, and this server has none configured: "
            f"{_SET_THE_STORE}, and run restore again"
        )


def put_back(settings: Settings, folder: Path) -> int:
    """Upload the unpacked shared snapshots into the configured store; how many."""
    store = store_for(settings)
    if store is None or not folder.is_dir():
        return 0
    files = sorted(folder.iterdir())
    for file in files:
        try:
            store.upload(file.name, file)
        except Exception as error:  # boto3's errors: endpoint, credentials, bucket
            raise BackupError(
                f"uploading snapshot {file.name} to {settings.snapshot_store} failed ({error}); "
                "nothing was restored: check the store's settings and run restore again"
            ) from None
    return len(files)
