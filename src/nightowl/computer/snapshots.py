"""Deep sleep: a sandbox's home as a snapshot (tar + zstd) in the blob store, and back.

Writing is atomic (a partial file renamed into place under its SHA-256). Restoring checks
every member before anything is written, refuses the whole archive on the first bad one, and
extracts into a new folder that replaces the home only once complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import zstandard

from nightowl.computer.sandbox import HOME_INSIDE

PREFIX = "blob:"
SUFFIX = ".tar.zst"
# Absolute link targets that stay inside the sandbox's own world (a venv links to /usr/bin).
SPOOL_BYTES = 256 * 1024 * 1024  # decompressed in memory up to this size, on disk beyond
ALLOWED_LINK_ROOTS = (
    HOME_INSIDE,
    "/usr",
    "/bin",
    "/lib",
    "/lib64",
    "/sbin",
    "/etc",
    "/dev",
    "/tmp",
    "/run",
    "/var/tmp",
)
MAX_HOME_BYTES = 20 * 1024**3  # apparent size: a sparse file must not become a full one


class SnapshotRejected(ValueError):
    """An archive holds a member that could write or point outside the home."""


class HomeTooLarge(ValueError):
    """A home is too large (in apparent size) to be archived; it stays on disk."""


class _HashingWriter:
    """A file writer that hashes what passes through (for content-addressed names)."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def archive(
    home: Path, blob_dir: Path, level: int = 3, max_bytes: int = MAX_HOME_BYTES
) -> tuple[str, int]:
    """Write `home` as a snapshot; its reference (`blob:<sha256>`) and its size in bytes.

    Only what `restore` accepts goes in (the same check, member by member): a FIFO, a socket
    or a link out of the sandbox's world is left out, so a snapshot always restores.
    Raises HomeTooLarge (leaving nothing behind) when the home's files add up to more than
    `max_bytes` in apparent size (a sparse file counts in full)."""
    blob_dir.mkdir(parents=True, exist_ok=True)
    partial = blob_dir / f"snapshot.{os.getpid()}.{id(home)}.partial"
    try:
        with open(partial, "wb") as raw:
            hashing = _HashingWriter(raw)
            compressor = zstandard.ZstdCompressor(level=level, threads=-1)
            packed = compressor.stream_writer(hashing, closefd=False)  # type: ignore[arg-type]
            with packed, tarfile.open(fileobj=packed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                links: set[str] = set()
                apparent = 0
                for path in _walk(home):
                    member = tar.gettarinfo(path, arcname=path.relative_to(home).as_posix())
                    try:
                        if member is None:  # a socket: nothing to keep
                            continue
                        check_member(member, links)
                    except SnapshotRejected:
                        continue  # restore would refuse it: leave it out, keep the rest
                    if member.isfile():
                        apparent += member.size  # checked before the file is read
                        if apparent > max_bytes:
                            raise HomeTooLarge(
                                f"the home holds {apparent:,} bytes or more; "
                                f"snapshots stop at {max_bytes:,}"
                            )
                        with open(path, "rb") as file:
                            tar.addfile(member, file)
                    else:
                        tar.addfile(member)
            raw.flush()
            os.fsync(raw.fileno())
        digest = hashing.digest.hexdigest()
        final = blob_dir / digest[:2] / f"{digest}{SUFFIX}"
        final.parent.mkdir(exist_ok=True)
        os.replace(partial, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return PREFIX + digest, hashing.size


def _walk(home: Path) -> Iterator[Path]:
    """Every entry under home, folders before what they hold, links not followed."""
    for folder, dirs, files in os.walk(home):
        dirs.sort()
        base = Path(folder)
        for name in dirs:
            yield base / name
        for name in sorted(files):
            yield base / name


def snapshot_path(blob_dir: Path, reference: str) -> Path:
    """Where a snapshot's bytes are."""
    digest = reference.removeprefix(PREFIX)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{reference!r} is not a snapshot reference")
    return blob_dir / digest[:2] / f"{digest}{SUFFIX}"


def check_member(member: tarfile.TarInfo, links: set[str]) -> None:
    """Refuse a member that could land or point outside home (`links`: symlinks seen so far)."""
    name = member.name
    normal = posixpath.normpath(name)
    if name.startswith("/") or ".." in name.split("/") or normal == ".":
        raise SnapshotRejected(f"member {name!r} points outside the home")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise SnapshotRejected(f"member {name!r} is a device, FIFO or other special file")
    parts = normal.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in links:
            raise SnapshotRejected(f"member {name!r} would be written through a link")
    if member.islnk():
        target = posixpath.normpath(member.linkname)
        if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
            raise SnapshotRejected(f"hard link {name!r} points outside the home")
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            if not any(target == r or target.startswith(r + "/") for r in ALLOWED_LINK_ROOTS):
                raise SnapshotRejected(f"link {name!r} points outside the home ({target})")
        else:
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(normal), target))
            if resolved == ".." or resolved.startswith("../"):
                raise SnapshotRejected(f"link {name!r} points outside the home ({target})")
        links.add(normal)


@contextlib.contextmanager
def _open_checked(path: Path) -> Iterator[tarfile.TarFile]:
    """The snapshot as a seekable tar whose every member passed `check_member`."""
    with open(path, "rb") as raw, tempfile.SpooledTemporaryFile(SPOOL_BYTES) as plain:
        zstandard.ZstdDecompressor().copy_stream(raw, plain)
        plain.seek(0)
        with tarfile.open(fileobj=plain, mode="r:") as tar:
            links: set[str] = set()
            for member in tar.getmembers():
                check_member(member, links)
            yield tar


def restore(blob_dir: Path, reference: str, home: Path, uid: int) -> None:
    """Replace `home` with the snapshot's content, owned by `uid`; refuse a bad archive whole."""
    source = snapshot_path(blob_dir, reference)
    staging = home.with_name(f".{home.name}.restoring")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    os.chown(staging, uid, uid)

    def owned(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
        member = tarfile.tar_filter(member, destination)
        return member.replace(uid=uid, gid=uid, uname="", gname="", deep=False)

    try:
        with _open_checked(source) as tar:  # every member checked before anything is written
            tar.extractall(staging, numeric_owner=True, filter=owned)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = home.with_name(f".{home.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if home.exists():
        os.replace(home, old)
    os.replace(staging, home)
    shutil.rmtree(old, ignore_errors=True)
