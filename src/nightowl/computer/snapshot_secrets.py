"""Keeping the owner's secrets out of a home's snapshot: each file is read through the
redactor once; a file that holds a secret (in any common form) goes into the archive
redacted, from a spooled copy, and every other file as it is."""

from __future__ import annotations

import tarfile
import tempfile
from typing import IO

from nightowl.safety.redaction import Redactor

CHUNK_BYTES = 1024 * 1024
SPOOL_BYTES = 64 * 1024 * 1024  # a redacted copy stays in memory up to this size


def add_redacted(
    tar: tarfile.TarFile, member: tarfile.TarInfo, file: IO[bytes], redactor: Redactor
) -> int:
    """Add a regular file to the archive without any secret it holds; how many it held."""
    scan = redactor.stream()
    while chunk := file.read(CHUNK_BYTES):
        scan.feed(chunk)
    scan.close()
    file.seek(0)
    if not scan.found:
        tar.addfile(member, file)
        return 0
    stream = redactor.stream()
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as copy:
        while chunk := file.read(CHUNK_BYTES):
            copy.write(stream.feed(chunk))
        copy.write(stream.close())
        member.size = copy.tell()
        copy.seek(0)
        tar.addfile(member, copy)
    return stream.found
