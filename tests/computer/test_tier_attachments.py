"""Attachments on a computer tier: `send_to_user` with files reads them inside the user's
computer on its host (their bytes come over the tier), and refuses what is missing or outside
the home, as it does in process (real processes and bubblewrap)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightowl.store.blobs import file_path
from tests.computer.sandboxes import UID_BASE
from tests.computer.tier import TOKEN, ComputerHostProcess
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# A binary file (a NUL early on, bytes that are not UTF-8) written in the computer.
MAKE_BINARY = "printf 'PNG\\000\\377\\376binary' > pic.png; head -c 300000 /dev/zero >> pic.png"


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_a_workers_send_to_user_attaches_files_from_the_computer_on_its_host(
    tmp_path: Path,
) -> None:
    script = [
        _call("write_file", path="report.txt", content="totals: 42\n"),
        _call("shell", command=MAKE_BINARY),
        say("Here they are.", files=["report.txt", "/home/agent/pic.png"]),
        say("And this?", files=["nope.txt"]),
        say("Or this?", files=["../../etc/passwd"]),
        say("Done.", final=True),
    ]
    model = write_script(tmp_path / "script.json", script)
    with fresh_database("postgresql", tmp_path) as url:
        common = {
            "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
            "NIGHTOWL_SANDBOX_NETWORK": "none",
            "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 95),
        }
        host = ComputerHostProcess(tmp_path / "host", url, env=common)
        worker = ServerProcess(
            tmp_path / "worker",
            url,
            model=model,
            env={"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_COMPUTER_HOSTS": host.url},
        )
        processes = [host.start(), worker.start()]
        try:
            with worker.client() as client:
                owner = client.get("/v1/me").json()["id"]
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "1", "text": "send me the files"},
                ).raise_for_status()
            sent = "SELECT body, meta FROM messages WHERE role = 'agent' ORDER BY seq"
            wait_for(lambda: [b for b, _ in rows(url, sent)][-1:] == ["Done."], timeout=180)
            found = rows(url, sent)
            assert [body for body, _ in found] == ["Here they are.", "Done."], found
            meta = found[0][1] if isinstance(found[0][1], dict) else json.loads(found[0][1])
            files = {f["name"]: f for f in meta["files"]}
            assert sorted(files) == ["pic.png", "report.txt"]
            home = host.data_dir / "homes" / owner
            assert not (worker.data_dir / "homes" / owner).exists()  # never on the worker
            for name, item in files.items():
                kept = file_path(worker.data_dir / "blobs", item["blob"]).read_bytes()
                assert kept == (home / name).read_bytes(), name
                assert item["size"] == len(kept)
            assert files["report.txt"]["content_type"] == "text/plain"
            results = [
                json.loads(p) if isinstance(p, str) else p
                for (p,) in rows(url, "SELECT payload FROM transcript_entries ORDER BY id")
            ]
            refusals = [
                r["text"]
                for r in results
                if r.get("kind") == "tool_result" and r.get("tool_name") == "send_to_user"
            ]
            assert any("'nope.txt' does not exist in your home folder" in t for t in refusals)
            assert any("is outside your home folder" in t for t in refusals)
        finally:
            for process in processes:
                process.stop()
