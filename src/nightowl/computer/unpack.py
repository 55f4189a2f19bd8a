"""Unpacking a home snapshot beneath one folder, with no link ever followed.

Restore runs this module as the sandbox's own uid (no capabilities, in a child process of the
system's Python, `/usr/bin/python3 -I -S -c <this source>`), so it uses the standard library
only and must not import nightowl. The plain tar arrives on stdin and the (fresh, empty)
folder as an inherited descriptor; every member is checked before it is written and the first
bad one ends the run, which leaves the folder for the caller to throw away.

Paths are walked from that descriptor one component at a time with O_NOFOLLOW (`openat`), so
whatever the members are, nothing is written through a symbolic link: not a member under a
link member, not a file over a link, not a hard link whose target passes through one. Hard
links may only point to a regular file met earlier in the archive, and a name may appear once
(a folder may be named again).

`MemberCheck` is shared with archiving, which leaves out what restore would refuse.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import sys
import tarfile

TYPE_CHECKING = False  # not typing's: the child starts without it
if TYPE_CHECKING:
    from typing import IO

REFUSED_EXIT = 3  # the exit status that says "a member was refused" (the reason on stderr)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_BYTES = 1024 * 1024


class SnapshotRejected(ValueError):
    """An archive holds a member that could write or point outside the home."""


class MemberCheck:
    """Checks members in archive order; refuses any that could land or point outside home.

    `link_roots`: absolute folders a symbolic link may point into (the sandbox's own system).
    """

    def __init__(self, link_roots: tuple[str, ...]) -> None:
        self.link_roots = link_roots
        self.kinds: dict[str, str] = {}  # name -> "dir", "file" or "link", as they were met

    def check(self, member: tarfile.TarInfo) -> str:
        """The member's normal name, once it passed; raises SnapshotRejected otherwise."""
        name = member.name
        normal = posixpath.normpath(name) if name else "."
        if name.startswith("/") or ".." in name.split("/") or normal in (".", "/"):
            raise SnapshotRejected(f"member {name!r} points outside the home")
        kind = _kind(member)
        parts = normal.split("/")
        if any(above != "dir" for above in self._above(normal)):
            raise SnapshotRejected(f"member {name!r} would be written through a link")
        if normal in self.kinds and not (kind == "dir" == self.kinds[normal]):
            raise SnapshotRejected(f"member {name!r} appears twice in the archive")
        if member.islnk():
            self._check_hard_link(member)
        if member.issym():
            self._check_symbolic_link(member, normal)
        for depth in range(1, len(parts)):
            self.kinds.setdefault("/".join(parts[:depth]), "dir")  # made on the way
        self.kinds[normal] = kind
        return normal

    def _above(self, normal: str) -> list[str]:
        """What each folder above `normal` was met as ("dir" when not met yet)."""
        parts = normal.split("/")
        return [self.kinds.get("/".join(parts[:depth]), "dir") for depth in range(1, len(parts))]

    def _check_hard_link(self, member: tarfile.TarInfo) -> None:
        target = member.linkname
        normal = posixpath.normpath(target) if target else "."
        if target.startswith("/") or ".." in target.split("/"):
            raise SnapshotRejected(f"hard link {member.name!r} points outside the home")
        if any(above != "dir" for above in self._above(normal)):
            raise SnapshotRejected(f"hard link {member.name!r} points through a link")
        if self.kinds.get(normal) != "file":
            raise SnapshotRejected(
                f"hard link {member.name!r} must point to a file earlier in the archive "
                f"({target!r} is not one)"
            )

    def _check_symbolic_link(self, member: tarfile.TarInfo, normal: str) -> None:
        target = member.linkname
        if target.startswith("/"):
            if not any(target == r or target.startswith(r + "/") for r in self.link_roots):
                raise SnapshotRejected(f"link {member.name!r} points outside the home ({target})")
            return
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(normal), target))
        if resolved == ".." or resolved.startswith("../"):
            raise SnapshotRejected(f"link {member.name!r} points outside the home ({target})")


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg() or member.islnk():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "link"
    raise SnapshotRejected(f"member {member.name!r} is a device, FIFO or other special file")


class _Folders:
    """Descriptors of folders beneath the root, walked with O_NOFOLLOW (the last one kept)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.last: tuple[str, int] | None = None

    def open(self, path: str, create: bool) -> int:
        """A descriptor (owned by this object) of folder `path` ("" for the root)."""
        if self.last is not None and self.last[0] == path:
            return self.last[1]
        self.close()
        fd = os.dup(self.root)
        for part in path.split("/") if path else ():
            fd = _step(fd, part, create, path)  # closes the folder above, even on failure
        self.last = (path, fd)
        return fd

    def close(self) -> None:
        """Close the kept descriptor."""
        if self.last is not None:
            os.close(self.last[1])
            self.last = None


def _step(fd: int, part: str, create: bool, path: str) -> int:
    """Open `part` in folder `fd` (closing `fd`), making it when `create`; never a link."""
    try:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(part, 0o700, dir_fd=fd)
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # a link or a file on the way
            raise SnapshotRejected(f"{path!r} would be reached through a link") from error
        raise
    finally:
        os.close(fd)


def extract(stream: IO[bytes], root: int, check: MemberCheck, max_bytes: int) -> None:
    """Write the tar read from `stream` beneath folder descriptor `root`, checking each member.

    Regular files add up (in apparent size) to at most `max_bytes`."""
    folders = _Folders(root)
    later: list[tuple[str, int, float]] = []  # folders get their mode and time last
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                name = check.check(member)
                parent, base = posixpath.split(name)
                fd = folders.open(parent, create=True)
                mode = member.mode & 0o1777  # no set-id bits
                if member.isdir():
                    _make_folder(fd, base)
                    later.append((name, mode, member.mtime))
                elif member.isreg():
                    total += member.size
                    if total > max_bytes:
                        raise SnapshotRejected(f"the files add up to more than {max_bytes:,} bytes")
                    source = tar.extractfile(member)
                    assert source is not None
                    _write_file(fd, base, source, mode, member.mtime)
                elif member.issym():
                    os.symlink(member.linkname, base, dir_fd=fd)
                    os.utime(base, (member.mtime, member.mtime), dir_fd=fd, follow_symlinks=False)
                else:  # a hard link to a file met earlier (MemberCheck saw to it)
                    _hard_link(folders, posixpath.normpath(member.linkname), name)
            for name, mode, mtime in reversed(later):
                fd = folders.open(name, create=False)
                os.fchmod(fd, mode)
                os.utime(fd, (mtime, mtime))
    finally:
        folders.close()


def _make_folder(parent: int, base: str) -> None:
    try:
        os.mkdir(base, 0o700, dir_fd=parent)
    except FileExistsError:
        os.close(os.open(base, _DIR_FLAGS, dir_fd=parent))  # made on the way: still a folder


def _write_file(parent: int, base: str, source: IO[bytes], mode: int, mtime: float) -> None:
    fd = os.open(base, _FILE_FLAGS, 0o600, dir_fd=parent)
    try:
        while chunk := source.read(_COPY_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.utime(fd, (mtime, mtime))
    finally:
        os.close(fd)


def _hard_link(folders: _Folders, target: str, name: str) -> None:
    target_parent, target_base = posixpath.split(target)
    parent, base = posixpath.split(name)
    source = os.dup(folders.open(target_parent, create=False))
    try:
        destination = folders.open(parent, create=True)
        os.link(target_base, base, src_dir_fd=source, dst_dir_fd=destination, follow_symlinks=False)
    finally:
        os.close(source)


def main() -> int:
    """Run as the child: argv[1] is JSON {"root_fd", "link_roots", "max_bytes"}."""
    options = json.loads(sys.argv[1])
    check = MemberCheck(tuple(options["link_roots"]))
    try:
        extract(sys.stdin.buffer, int(options["root_fd"]), check, int(options["max_bytes"]))
    except (SnapshotRejected, tarfile.TarError) as error:
        print(str(error), file=sys.stderr)
        return REFUSED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
