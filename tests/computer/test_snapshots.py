"""Snapshots: a home survives the round trip byte for byte; a crafted archive is refused whole."""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
from pathlib import Path

import pytest
import zstandard

from nightowl.computer.snapshots import (
    HomeTooLarge,
    SnapshotRejected,
    archive,
    restore,
    snapshot_path,
)
from nightowl.computer.unpack import MemberCheck, extract

UID = 3_799_999


def _tree(root: Path) -> list[tuple[str, str, int]]:
    """Every entry under root: its path, content hash or link target, and mode."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            if path.is_symlink():
                what = "-> " + os.readlink(path)
            elif path.is_dir():
                what = "dir"
            else:
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            found.append((str(path.relative_to(root)), what, path.lstat().st_mode))
    return sorted(found)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "project" / ".git").mkdir(parents=True)
    (home / "project" / "main.py").write_text("print('hi')\n")
    (home / "project" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (home / "data.bin").write_bytes(os.urandom(300_000))
    (home / "empty").mkdir()
    (home / "run.sh").write_text("#!/bin/sh\necho run\n")
    (home / "run.sh").chmod(0o755)
    (home / "python").symlink_to("/usr/bin/python3")  # a venv-style link into the system
    (home / "latest").symlink_to("project/main.py")
    (home / "code").symlink_to("project")  # a folder reached by a link inside the home
    os.link(home / "run.sh", home / "project" / "run-again.sh")  # a hard link inside too
    return home


def test_a_home_round_trips_byte_identical(tmp_path: Path) -> None:
    home = _home(tmp_path)
    os.utime(home / "data.bin", (1_700_000_000, 1_700_000_000))
    written = 1_700_000_000
    before = _tree(home)
    reference, size = archive(home, tmp_path / "blobs")
    assert (
        reference.startswith("blob:")
        and size == snapshot_path(tmp_path / "blobs", reference).stat().st_size
    )
    assert not list((tmp_path / "blobs").glob("*.partial"))  # written atomically

    restore(tmp_path / "blobs", reference, home, UID)
    assert _tree(home) == before
    assert {p.lstat().st_uid for p in [home, *home.rglob("*")]} == {UID}
    assert int((home / "data.bin").stat().st_mtime) == written  # times survive too
    assert (home / "code" / "main.py").read_text() == "print('hi')\n"
    assert (home / "run.sh").stat().st_ino == (home / "project" / "run-again.sh").stat().st_ino


def _crafted(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    packed = zstandard.ZstdCompressor().compress(buffer.getvalue())
    digest = hashlib.sha256(packed).hexdigest()
    path = tmp_path / "blobs" / digest[:2] / f"{digest}.tar.zst"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(packed)
    return "blob:" + digest


def _file(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), b"payload"


def _dir(name: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, b""


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


def _special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, b""


HARD = tarfile.LNKTYPE
# OUTSIDE stands for a folder beside the home holding victim.txt (root's, 0600): the sandbox
# may link into /tmp, where tests' folders are, so these links pass the name checks alone.
OUTSIDE = "{outside}"


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([_file("ok.txt"), _file("../escaped.txt")], "outside the home"),
        ([_file("a/../../escaped.txt")], "outside the home"),
        ([_file("./../escaped.txt")], "outside the home"),
        ([_file("/etc/cron.d/evil")], "outside the home"),
        ([_dir("./")], "outside the home"),
        ([_link("out", "../../etc")], "points outside the home"),
        ([_link("key", "/root/.ssh/id_ed25519")], "points outside the home"),
        ([_link("db", "/var/lib/postgresql")], "points outside the home"),
        ([_link("hard", "/etc/shadow", HARD)], "hard link"),
        ([_link("hard", "a/../../etc/shadow", HARD)], "hard link"),
        ([_link("dir", "sub"), _file("dir/through.txt")], "through a link"),
        ([(tarfile.TarInfo("null"), b"")], "special file"),
        ([_special("disk", tarfile.BLKTYPE)], "special file"),
        ([_special("pipe", tarfile.FIFOTYPE)], "special file"),
        # A hard link whose target passes through a symbolic link member.
        ([_link("s", OUTSIDE), _link("h", "s/victim.txt", HARD)], "points through a link"),
        # A hard link to a symbolic link member (a link would follow it to the victim).
        ([_link("s", OUTSIDE + "/victim.txt"), _link("h", "s", HARD)], "must point to a file"),
        # A hard link to a folder, or to a file that is not (yet) in the archive.
        ([_dir("d"), _link("h", "d", HARD)], "must point to a file"),
        ([_link("h", "later.txt", HARD), _file("later.txt")], "must point to a file"),
        # A link chain that reads as inside the home but leads out: x/.. is /, not the home.
        (
            [_link("x", "/usr"), _link("y", "x/.." + OUTSIDE), _link("h", "y/victim.txt", HARD)],
            "points through a link",
        ),
        # A member under a folder replaced by a link.
        ([_dir("d"), _link("d", OUTSIDE), _file("d/victim.txt")], "appears twice"),
        ([_dir("d"), _file("d/a"), _link("d", OUTSIDE), _link("h", "d/a", HARD)], "twice"),
        # A symbolic link, then a regular file of the same name (written through it).
        ([_link("f", OUTSIDE + "/victim.txt"), _file("f")], "appears twice"),
        ([_file("f"), _file("f")], "appears twice"),
        # A file, then members under it as if it were a folder.
        ([_file("f"), _file("f/x")], "through a link"),
    ],
)
def test_a_crafted_archive_is_refused_and_the_home_is_untouched(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], reason: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("root's own")
    victim.chmod(0o600)
    assert str(outside).startswith("/tmp/")  # so the links above pass the name checks
    for info, _ in members:
        if info.name == "null":
            info.type = tarfile.CHRTYPE
        info.linkname = info.linkname.replace(OUTSIDE, str(outside))
    home = _home(tmp_path)
    before = _tree(home)
    reference = _crafted(tmp_path, members)
    with pytest.raises(SnapshotRejected, match=reason):
        restore(tmp_path / "blobs", reference, home, UID)
    assert _tree(home) == before
    assert not (tmp_path / "escaped.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blobs", "home", "outside"]
    assert [p.name for p in outside.iterdir()] == ["victim.txt"]
    seen = victim.stat()
    assert (seen.st_uid, seen.st_nlink, seen.st_mode & 0o777) == (0, 1, 0o600)
    assert victim.read_text() == "root's own"


def test_a_restore_writes_as_the_sandbox_user_only(tmp_path: Path) -> None:
    """Even a member the checks let through could only write where the sandbox's uid may."""
    home = _home(tmp_path)
    reference = _crafted(tmp_path, [_dir("project"), _file("project/new.txt")])
    restore(tmp_path / "blobs", reference, home, UID)
    made = home / "project" / "new.txt"
    assert made.read_text() == "payload" and made.stat().st_uid == UID
    assert sorted(p.name for p in home.iterdir()) == ["project"]


def test_what_restore_would_refuse_is_left_out_of_the_archive_and_the_rest_restores(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    os.mkfifo(home / "pipe")
    (home / "keys").symlink_to("/root/.ssh")  # out of the sandbox's world
    (home / "null").symlink_to("/dev/null")  # the sandbox's own /dev: kept
    (home / "..data").write_text("a name, not a path")  # kubectl-style names are fine
    reference, _ = archive(home, tmp_path / "blobs")
    restore(tmp_path / "blobs", reference, home, UID)
    names = sorted(p.name for p in home.iterdir())
    assert "pipe" not in names and "keys" not in names
    assert os.readlink(home / "null") == "/dev/null"
    assert (home / "..data").read_text() == "a name, not a path"
    assert (home / "project" / "main.py").read_text() == "print('hi')\n"


def test_a_home_too_large_is_not_archived(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with open(home / "sparse.img", "wb") as file:
        file.truncate(10 * 1024 * 1024)  # 10 MB that take no disk
    with pytest.raises(HomeTooLarge, match="snapshots stop at 5,000,000"):
        archive(home, tmp_path / "blobs", max_bytes=5_000_000)
    assert not (tmp_path / "blobs").exists() or not list((tmp_path / "blobs").rglob("*.zst"))


class _LetsAllThrough(MemberCheck):
    """A check that passes every member (to try the unpacking's own walking on its own)."""

    def check(self, member: tarfile.TarInfo) -> str:
        return posixpath.normpath(member.name)


@pytest.mark.parametrize(
    "members",
    [
        [_link("s", "{outside}"), _file("s/victim.txt")],
        [_link("s", "{outside}"), _link("h", "s/victim.txt", HARD)],
        [_link("f", "{outside}/victim.txt"), _file("f")],
    ],
)
def test_unpacking_never_follows_a_link_even_past_the_checks(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("root's own")
    for info, _ in members:
        info.linkname = info.linkname.replace("{outside}", str(outside))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    (tmp_path / "into").mkdir()
    root = os.open(tmp_path / "into", os.O_RDONLY | os.O_DIRECTORY)
    try:
        buffer.seek(0)
        with pytest.raises((SnapshotRejected, FileExistsError)):
            extract(buffer, root, _LetsAllThrough(()), 10**6)
    finally:
        os.close(root)
    assert [p.name for p in outside.iterdir()] == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "root's own"
    assert (outside / "victim.txt").stat().st_nlink == 1
