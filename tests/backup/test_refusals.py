"""A restore checks the archive whole and refuses, with what to do, before it writes anything."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nightowl.backup.create import create_backup
from nightowl.backup.manifest import MANIFEST_NAME, BackupError
from nightowl.backup.restore import restore_backup
from nightowl.config import Settings
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from tests.databases import fresh_database


def _settings(data_dir: Path, database_url: str | None = None) -> Settings:
    return Settings(data_dir=data_dir, database_url=database_url, secret_key=None)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A backup of a small SQLite server: its store and one computer's file."""
    settings = _settings(tmp_path / "old")
    database = Database(settings.store_url)
    upgrade(database)
    database.dispose()
    (settings.homes_dir / "u1").mkdir(parents=True)
    (settings.homes_dir / "u1" / "notes.txt").write_text("mine")
    path = tmp_path / "old.backup"
    create_backup(settings, path)
    return path


def _rewrite(path: Path, change: Callable[[str, bytes], bytes | None]) -> None:
    """Write the archive again with each regular member's bytes passed through `change`
    (None drops the member)."""
    with tarfile.open(path, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar]  # type: ignore[union-attr]
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members:
            if member.isreg():
                changed = change(member.name, data)
                if changed is None:
                    continue
                member.size = len(changed)
                tar.addfile(member, io.BytesIO(changed))
            else:
                tar.addfile(member)


def _refused(settings: Settings, archive: Path) -> str:
    with pytest.raises(BackupError) as refused:
        restore_backup(settings, archive)
    assert not settings.data_dir.exists() or not any(settings.data_dir.iterdir())
    return str(refused.value)


def test_a_damaged_file_is_found_before_anything_is_written(tmp_path: Path, archive: Path) -> None:
    _rewrite(archive, lambda name, data: b"theirs" if name.endswith("notes.txt") else data)
    message = _refused(_settings(tmp_path / "new"), archive)
    assert "files/homes/u1/notes.txt" in message and "use another backup" in message


def test_a_file_missing_from_the_archive_is_named(tmp_path: Path, archive: Path) -> None:
    _rewrite(archive, lambda name, data: None if name.endswith("notes.txt") else data)
    assert "lacks files/homes/u1/notes.txt" in _refused(_settings(tmp_path / "new"), archive)


def test_an_archive_without_a_manifest_is_not_a_backup(tmp_path: Path, archive: Path) -> None:
    _rewrite(archive, lambda name, data: None if name == MANIFEST_NAME else data)
    assert "not a nightowl backup" in _refused(_settings(tmp_path / "new"), archive)


def test_a_cut_off_archive_is_refused(tmp_path: Path, archive: Path) -> None:
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    assert "not a complete nightowl backup" in _refused(_settings(tmp_path / "new"), archive)


def test_a_backup_from_a_newer_nightowl_says_which_to_install(
    tmp_path: Path, archive: Path
) -> None:
    def newer(name: str, data: bytes) -> bytes:
        if name != MANIFEST_NAME:
            return data
        manifest = json.loads(data)
        manifest.update(app_store_revision="9999", nightowl_version="9.0.0")
        return json.dumps(manifest).encode()

    _rewrite(archive, newer)
    message = _refused(_settings(tmp_path / "new"), archive)
    assert "migration 9999" in message and "install nightowl 9.0.0 or newer" in message


def test_a_sqlite_backup_does_not_go_into_postgresql(tmp_path: Path, archive: Path) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        message = _refused(_settings(tmp_path / "new", url), archive)
    assert "holds a sqlite store" in message and "unset NIGHTOWL_DATABASE_URL" in message


def test_a_store_in_use_is_replaced_only_with_force(tmp_path: Path, archive: Path) -> None:
    settings = _settings(tmp_path / "new")
    (settings.homes_dir / "u2").mkdir(parents=True)
    (settings.homes_dir / "u2" / "other.txt").write_text("other")
    with pytest.raises(BackupError, match="--force"):
        restore_backup(settings, archive)
    assert (settings.homes_dir / "u2" / "other.txt").exists()
    restore_backup(settings, archive, force=True)
    assert (settings.homes_dir / "u1" / "notes.txt").read_text() == "mine"
    assert not (settings.homes_dir / "u2").exists()


def _with_shared_snapshot(path: Path, name: str, data: bytes) -> None:
    """Add a member under shared-snapshots/ to the archive, listed in its manifest."""
    member = f"shared-snapshots/{name}"

    def listed(member_name: str, raw: bytes) -> bytes:
        if member_name != MANIFEST_NAME:
            return raw
        manifest = json.loads(raw)
        manifest["snapshot_store"] = "s3://snapshots/tier"
        sha256 = hashlib.sha256(data).hexdigest()
        manifest["members"][member] = {"bytes": len(data), "sha256": sha256}
        return json.dumps(manifest).encode()

    _rewrite(path, listed)
    with tarfile.open(path, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar]  # type: ignore[union-attr]
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for old, raw in members:
            tar.addfile(old, io.BytesIO(raw) if old.isreg() else None)


def test_shared_snapshots_are_not_restored_without_a_shared_store(
    tmp_path: Path, archive: Path
) -> None:
    data = b"a home"
    _with_shared_snapshot(archive, f"{hashlib.sha256(data).hexdigest()}.tar.zst", data)
    message = _refused(_settings(tmp_path / "new"), archive)
    assert "1 computer snapshot(s) from the shared store s3://snapshots/tier" in message
    assert "set NIGHTOWL_SNAPSHOT_STORE" in message


def test_a_shared_snapshot_that_is_not_what_its_name_says_is_refused(
    tmp_path: Path, archive: Path
) -> None:
    _with_shared_snapshot(archive, f"{'0' * 64}.tar.zst", b"a home")
    settings = _settings(tmp_path / "new")
    settings.snapshot_store = "s3://snapshots/tier"
    message = _refused(settings, archive)
    assert "is not the snapshot its name says" in message


def test_a_failed_upload_leaves_the_store_in_use_as_it_was(tmp_path: Path, archive: Path) -> None:
    data = b"a home"
    _with_shared_snapshot(archive, f"{hashlib.sha256(data).hexdigest()}.tar.zst", data)
    settings = _settings(tmp_path / "new")
    settings.snapshot_store = "s3://snapshots/tier"
    settings.snapshot_store_endpoint = "http://127.0.0.1:9"  # nothing listens there
    (settings.homes_dir / "u2").mkdir(parents=True)
    (settings.homes_dir / "u2" / "other.txt").write_text("other")
    with pytest.raises(BackupError, match=r"uploading snapshot .* nothing was restored"):
        restore_backup(settings, archive, force=True)
    assert (settings.homes_dir / "u2" / "other.txt").read_text() == "other"


def test_a_computer_tier_is_not_backed_up_without_its_shared_store(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "tier")
    settings.computer_hosts = "http://10.0.0.5:8790"
    with pytest.raises(BackupError, match="set NIGHTOWL_SNAPSHOT_STORE"):
        create_backup(settings, tmp_path / "tier.backup")
    assert not (tmp_path / "tier.backup").exists()


def test_an_archive_of_the_first_format_still_restores(tmp_path: Path, archive: Path) -> None:
    def first_format(name: str, data: bytes) -> bytes:
        if name != MANIFEST_NAME:
            return data
        manifest = json.loads(data)
        manifest["format"] = 1
        del manifest["snapshot_store"]
        return json.dumps(manifest).encode()

    _rewrite(archive, first_format)
    settings = _settings(tmp_path / "new")
    restore_backup(settings, archive)
    assert (settings.homes_dir / "u1" / "notes.txt").read_text() == "mine"


def test_an_archive_of_an_unknown_format_names_the_nightowl_that_wrote_it(
    tmp_path: Path, archive: Path
) -> None:
    def future(name: str, data: bytes) -> bytes:
        if name != MANIFEST_NAME:
            return data
        return json.dumps({**json.loads(data), "format": 3, "nightowl_version": "9.1"}).encode()

    _rewrite(archive, future)
    message = _refused(_settings(tmp_path / "new"), archive)
    assert "format is 3; this nightowl reads formats 1 and 2" in message and "(9.1)" in message
