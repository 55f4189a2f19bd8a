"""Where snapshots are shared between computer hosts: an S3-compatible bucket.

A host always writes and unpacks a snapshot through its own snapshot folder (snapshots.py);
with a shared store, a snapshot is uploaded there once written and downloaded into the folder
when another host wakes the computer. Snapshot names are their content's SHA-256, so an upload
never overwrites a different snapshot and a download can be checked against its name.
Without a shared store (one machine), the local folder is the only store.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nightowl.computer.errors import SandboxError


class SnapshotMissing(SandboxError):
    """The shared store has no snapshot of that name."""


@dataclass(frozen=True)
class S3Location:
    """A bucket and key prefix, and the S3-compatible server that holds them."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None  # None: AWS itself
    region: str = "us-east-1"

    @classmethod
    def parse(cls, url: str, endpoint_url: str | None, region: str) -> S3Location:
        """`s3://bucket/prefix` (with the endpoint of a MinIO, Ceph, R2 … server, or none)."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{url!r} is not an s3://bucket/prefix address")
        prefix = parts.path.strip("/")
        return cls(parts.netloc, f"{prefix}/" if prefix else "", endpoint_url, region)


class S3SnapshotStore:
    """Snapshots in an S3-compatible bucket (credentials from boto3's usual chain: the
    AWS_* environment variables, a profile, or an instance role)."""

    def __init__(self, location: S3Location) -> None:
        import boto3  # only a computer tier across machines needs it

        self.location = location
        self._client: Any = boto3.client(
            "s3", endpoint_url=location.endpoint_url, region_name=location.region
        )

    def _key(self, name: str) -> str:
        return f"{self.location.prefix}snapshots/{name}"

    def upload(self, name: str, source: Path) -> None:
        """Put the snapshot file at `source` in the bucket (blocking)."""
        self._client.upload_file(str(source), self.location.bucket, self._key(name))

    def download(self, name: str, target: Path, sha256: str) -> None:
        """Fetch a snapshot into `target` (atomically), checked against its SHA-256."""
        partial = target.with_name(f"{target.name}.{os.getpid()}.download")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._client.download_file(self.location.bucket, self._key(name), str(partial))
        except Exception as error:
            partial.unlink(missing_ok=True)
            if getattr(error, "response", {}).get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                raise SnapshotMissing(f"the shared store has no snapshot {name}") from None
            raise SandboxError(f"fetching snapshot {name} failed: {error}") from error
        digest = hashlib.sha256()
        with open(partial, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            raise SandboxError(f"snapshot {name} from the shared store does not match its name")
        os.replace(partial, target)
