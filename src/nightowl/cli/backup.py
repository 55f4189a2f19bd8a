"""`nightowl backup PATH` and `nightowl restore PATH [--force]` (work on the stores directly)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nightowl.backup.manifest import BackupError
from nightowl.cli.client import Commands, load_settings, print_error
from nightowl.config import Settings


def add_commands(commands: Commands) -> None:
    """Add `backup` and `restore`."""
    backup = commands.add_parser(
        "backup", help="write the stores, computers' files and keys to one archive"
    )
    backup.add_argument("path", type=Path, help="the archive to write (must not exist)")
    backup.set_defaults(run=lambda args: _backup(args, load_settings()))
    restore = commands.add_parser(
        "restore", help="check a backup archive and restore it (stop every server first)"
    )
    restore.add_argument("path", type=Path, help="an archive `nightowl backup` wrote")
    restore.add_argument("--force", action="store_true", help="replace a store that is not empty")
    restore.set_defaults(run=lambda args: _restore(args, load_settings()))


def _backup(args: argparse.Namespace, settings: Settings) -> int:
    from nightowl.backup.create import create_backup

    try:
        summary = create_backup(settings, args.path)
    except BackupError as error:
        return print_error("backup", error)
    manifest = summary.manifest
    print(
        f"wrote {summary.path} ({summary.bytes:,} bytes): {manifest.database} store at "
        f"migration {manifest.app_store_revision}, {len(manifest.members)} files"
    )
    if manifest.snapshot_store:
        print(f"{summary.shared_snapshots} computer snapshot(s) from {manifest.snapshot_store}")
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if manifest.vault_key == "in-backup":
        print("it holds the vault key: keep it as safe as the server itself")
    else:
        print("the vault key comes from NIGHTOWL_SECRET_KEY and is not in it: keep that too")
    return 0


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    from nightowl.backup.restore import restore_backup

    try:
        summary = restore_backup(settings, args.path, force=args.force)
    except BackupError as error:
        return print_error("restore", error)
    manifest = summary.manifest
    print(
        f"restored the backup of {manifest.created_at} (nightowl {manifest.nightowl_version}, "
        f"{manifest.database}): start the server as before"
    )
    if summary.shared_snapshots:
        print(f"{summary.shared_snapshots} computer snapshot(s) put back into the shared store")
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
