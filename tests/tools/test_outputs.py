"""Large outputs: stored aside with a preview in history, and readable in parts later."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nightowl.store.blobs import get_text, put_text
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.output_blobs import record_output_blob
from nightowl.tools.outputs import READ_OUTPUT, ReadOutputArgs
from nightowl.tools.registry import ToolContext
from nightowl.tools.web import WebFetchArgs, web_fetch_tool
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

BIG_PAGE = (
    "<html><body><script>alert(1)</script>"
    + "".join(f"<p>line {n} of the report</p>\n" for n in range(5000))
    + "<p>NEEDLE: the answer is 42</p></body></html>"
)


def _context(tmp_path: Path, owner: str = "o") -> ToolContext:
    database = Database(f"sqlite:///{tmp_path / 'x.db'}")
    upgrade(database)
    return ToolContext(
        database=database,
        blob_dir=tmp_path / "blobs",
        conversation_id="c",
        owner_id=owner,
        turn_id="t",
        call_id="0.0",
        home=tmp_path / "home",
    )


@pytest.mark.parametrize("trust", ["untrusted", "agent"])
def test_read_output_pages_and_greps_with_the_originals_trust(tmp_path: Path, trust: str) -> None:
    context = _context(tmp_path)
    text = "\n".join(f"row {n}" for n in range(3000)) + "\nNEEDLE here"
    reference = put_text(context.blob_dir, text)
    with context.database.write() as session:
        record_output_blob(session, "o", reference, trust)
    assert get_text(context.blob_dir, reference) == text
    page = asyncio.run(READ_OUTPUT.run(ReadOutputArgs(reference=reference, limit=50), context))
    assert "Characters 0-50" in page.content and "Next: offset=50" in page.content
    assert page.meta["trust"] == trust  # reading the rest carries the original's trust
    found = asyncio.run(
        READ_OUTPUT.run(ReadOutputArgs(reference=reference, pattern="NEEDLE"), context)
    )
    assert "1 matching lines" in found.content and "3001: NEEDLE here" in found.content
    assert found.meta["trust"] == trust
    missing = asyncio.run(READ_OUTPUT.run(ReadOutputArgs(reference="blob:" + "0" * 64), context))
    assert missing.is_error and "exact blob: reference" in missing.content
    # Another user cannot read it, even knowing the reference.
    other = replace(context, owner_id="someone-else")
    refused = asyncio.run(READ_OUTPUT.run(ReadOutputArgs(reference=reference), other))
    assert refused.is_error and "NEEDLE" not in refused.content


def test_web_fetch_refuses_local_addresses_unless_allowed(tmp_path: Path) -> None:
    refused = asyncio.run(
        web_fetch_tool(False).run(WebFetchArgs(url="http://127.0.0.1:5432/"), _context(tmp_path))
    )
    assert refused.is_error and "private or local" in refused.content
    bad = asyncio.run(
        web_fetch_tool(True).run(WebFetchArgs(url="file:///etc/passwd"), _context(tmp_path))
    )
    assert bad.is_error and "http(s)" in bad.content


@pytest.fixture
def page_url() -> Any:
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = BIG_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/report"
    server.shutdown()


@pytest.mark.slow
def test_a_large_page_enters_history_as_a_preview_and_a_reference(
    tmp_path: Path, page_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "web_fetch", "arguments": {"url": page_url}}]},
            {
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "read it", "final": True}}
                ]
            },
        ],
    )
    server = ServerProcess(
        tmp_path / "data", model=model, env={"NIGHTOWL_WEB_FETCH_PRIVATE": "true"}
    ).start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages", json={"client_id": "a", "text": "go"}
            )
        wait_for(lambda: rows(url, "SELECT status FROM turns") == [("done",)], timeout=60)
    finally:
        server.stop()
    results = [
        json.loads(p) if isinstance(p, str) else p
        for (p,) in rows(url, "SELECT payload FROM transcript_entries ORDER BY id")
    ]
    fetched = next(
        e for e in results if e["kind"] == "tool_result" and e["tool_name"] == "web_fetch"
    )
    assert len(fetched["text"]) < 4_000 and "blob:" in fetched["text"]
    assert fetched["trust"] == "untrusted"
    assert "alert(1)" not in fetched["text"]
    reference = "blob:" + fetched["text"].split("blob:")[1][:64]
    full = get_text(tmp_path / "data" / "blobs", reference)
    assert "NEEDLE: the answer is 42" in full and len(full) > 50_000
