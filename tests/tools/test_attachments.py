"""send_to_user attaches files from the owner's home only, never through a link out of it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nightowl.store.blobs import file_path
from nightowl.tools.messaging import attach_files
from nightowl.tools.registry import ToolContext


def _ctx(tmp_path: Path, limit: int = 1000) -> ToolContext:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return ToolContext(
        database=None,  # type: ignore[arg-type]  # attaching never touches the store
        blob_dir=tmp_path / "blobs",
        conversation_id="c",
        owner_id="u",
        turn_id="t",
        call_id="0.0",
        home=home,
        max_attachment_bytes=limit,
    )


def test_a_file_in_the_home_is_copied_into_the_blob_store(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    (ctx.home / "reports").mkdir()
    (ctx.home / "reports" / "q3.csv").write_text("month,total\n")
    (ctx.home / "latest.csv").symlink_to("reports/q3.csv")  # a link inside the home is fine
    for given in (
        "reports/q3.csv",
        "/reports/q3.csv",
        "/home/agent/reports/q3.csv",  # as the sandbox's tools name it
        "~/reports/q3.csv",
        "latest.csv",
    ):
        attached: Any = attach_files([given], ctx)
        assert isinstance(attached, list), attached
        [item] = attached
        assert item["name"] == "q3.csv" and item["size"] == 12
        assert item["content_type"] == "text/csv"
        assert file_path(ctx.blob_dir, item["blob"]).read_text() == "month,total\n"


def test_nothing_outside_the_home_can_be_attached(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (ctx.home / "leak").symlink_to(secret)
    (ctx.home / "hop").symlink_to(tmp_path)
    (ctx.home / "folder").mkdir()
    expectations = {
        "../secret.txt": "outside your home",
        "leak": "outside your home",
        "hop/secret.txt": "outside your home",
        "folder": "does not exist",
        "missing.txt": "does not exist",
        ".": "outside your home",
    }
    for given, problem in expectations.items():
        answer = attach_files([given], ctx)
        assert isinstance(answer, str) and problem in answer, (given, answer)
    assert not (tmp_path / "blobs").exists()


def test_a_file_over_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, limit=100)
    (ctx.home / "big.bin").write_bytes(os.urandom(101))
    answer = attach_files(["big.bin"], ctx)
    assert isinstance(answer, str) and "101 bytes; the limit is 100" in answer
