"""A computer tier for tests: `nightowl computer-host` processes and a local S3-compatible
server (moto in server mode), each on its own 127.0.0.1 port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import httpx

from tests.server import NIGHTOWL, ServerProcess, free_port

TOKEN = "tier-token-for-tests-0123456789"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class ComputerHostProcess(ServerProcess):
    """`nightowl computer-host` as a process (its address is its name in the placement)."""

    def launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.env["NIGHTOWL_COMPUTER_HOST_URL"] = self.url
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [NIGHTOWL, "computer-host"], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )


@contextmanager
def s3_server(tmp_path: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server with a bucket `snapshots`: the settings that point a host at it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    moto = str(Path(sys.executable).parent / "moto_server")
    with open(tmp_path / "moto.log", "ab") as log:
        process = subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, **S3_ENV},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError((tmp_path / "moto.log").read_text()[-2000:]) from None
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_keys()).create_bucket(
            Bucket="snapshots"
        )
        yield {
            **S3_ENV,
            "NIGHTOWL_SNAPSHOT_STORE": "s3://snapshots/tier",
            "NIGHTOWL_SNAPSHOT_STORE_ENDPOINT": url,
        }
    finally:
        process.kill()
        process.wait(timeout=10)


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"],
    }


def snapshot_keys(endpoint: str) -> list[str]:
    """The snapshot objects in the shared store."""
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
    listed = client.list_objects_v2(Bucket="snapshots")
    return [item["Key"] for item in listed.get("Contents", [])]


def empty_bucket(endpoint: str) -> None:
    """Delete every object in the shared store (a lost bucket)."""
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
    for key in snapshot_keys(endpoint):
        client.delete_object(Bucket="snapshots", Key=key)
