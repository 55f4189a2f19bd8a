"""Deep sleep: a sandbox's home as a snapshot (tar + zstd) in the blob store, and back.

Writing is atomic (a partial file renamed into place under its SHA-256). Restoring unpacks
into a new, empty folder as the sandbox's own uid (`unpack.py`, in a child process), checking
each member before it is written and never following a link; the first bad member refuses the
whole archive, and the folder replaces the home only once complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import zstandard

from nightowl.computer.bubblewrap import SYSTEM_PYTHON
from nightowl.computer.sandbox import HOME_INSIDE
from nightowl.computer.snapshot_secrets import add_redacted
from nightowl.computer.unpack import REFUSED_EXIT, MemberCheck
from nightowl.computer.unpack import SnapshotRejected as SnapshotRejected
from nightowl.safety.redaction import Redactor

PREFIX = "blob:"
SUFFIX = ".tar.zst"
UNPACK_SOURCE = (Path(__file__).parent / "unpack.py").read_text()
# Absolute link targets that stay inside the sandbox's own world (a venv links to /usr/bin).
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
    home: Path,
    blob_dir: Path,
    level: int = 3,
    max_bytes: int = MAX_HOME_BYTES,
    redactor: Redactor | None = None,
) -> tuple[str, int]:
    """Write `home` as a snapshot; its reference (`blob:<sha256>`) and its size in bytes.

    Only what `restore` accepts goes in (the same check, member by member): a FIFO, a socket
    or a link out of the sandbox's world is left out, so a snapshot always restores.
    Raises HomeTooLarge (leaving nothing behind) when the home's files add up to more than
    `max_bytes` in apparent size (a sparse file counts in full). With a `redactor` (the
    owner's secrets), no file goes in holding a secret's value: it goes in redacted."""
    blob_dir.mkdir(parents=True, exist_ok=True)
    partial = blob_dir / f"snapshot.{os.getpid()}.{id(home)}.partial"
    try:
        with open(partial, "wb") as raw:
            hashing = _HashingWriter(raw)
            compressor = zstandard.ZstdCompressor(level=level, threads=-1)
            packed = compressor.stream_writer(hashing, closefd=False)  # type: ignore[arg-type]
            with packed, tarfile.open(fileobj=packed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                check = MemberCheck(ALLOWED_LINK_ROOTS)
                apparent = 0
                for path in _walk(home):
                    member = tar.gettarinfo(path, arcname=path.relative_to(home).as_posix())
                    try:
                        if member is None:  # a socket: nothing to keep
                            continue
                        check.check(member)
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
                            if redactor:  # safety: the snapshot never holds a secret
                                add_redacted(tar, member, file, redactor)
                            else:
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


def restore(blob_dir: Path, reference: str, home: Path, uid: int) -> None:
    """Replace `home` with the snapshot's content, owned by `uid`; refuse a bad archive whole."""
    source = snapshot_path(blob_dir, reference)
    staging = home.with_name(f".{home.name}.restoring")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    os.chown(staging, uid, uid)
    try:
        _unpack_as(uid, source, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = home.with_name(f".{home.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if home.exists():
        os.replace(home, old)
    os.replace(staging, home)
    shutil.rmtree(old, ignore_errors=True)


def _unpack_as(uid: int, source: Path, folder: Path) -> None:
    """Unpack the snapshot at `source` into the empty `folder` as `uid` (see unpack.py)."""
    root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    options = {"root_fd": root, "link_roots": ALLOWED_LINK_ROOTS, "max_bytes": MAX_HOME_BYTES}
    try:
        with open(source, "rb") as raw, tempfile.TemporaryFile() as errors:
            child = subprocess.Popen(
                [SYSTEM_PYTHON, "-I", "-S", "-c", UNPACK_SOURCE, json.dumps(options)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                pass_fds=(root,),
                user=uid,
                group=uid,
                extra_groups=[],
                umask=0o077,
                cwd="/",
                env={"LANG": "C.UTF-8"},
            )
            assert child.stdin is not None
            try:
                with child.stdin:
                    zstandard.ZstdDecompressor().copy_stream(raw, child.stdin)
            except BrokenPipeError:
                pass  # the child refused a member and stopped reading: its status says why
            except BaseException:
                child.kill()
                raise
            finally:
                status = child.wait()
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip()
    finally:
        os.close(root)
    if status == REFUSED_EXIT:
        raise SnapshotRejected(said.splitlines()[-1] if said else "the archive was refused")
    if status != 0:
        raise OSError(f"unpacking the snapshot failed (status {status}): {said[-500:]}")
