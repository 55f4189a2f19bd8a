"""`nightowl evals` on the store directly: mark a reply wrong, edit the draft's checker (a bad
one refused with why), keep it, show and list it, and replay it, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from nightowl.safety.vault import load_key
from nightowl.store.database import Database
from tests.evals.scripts import say
from tests.evals.test_mark_wrong import SECRET, WRONG, _failed_turn
from tests.server import NIGHTOWL


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NIGHTOWL, "evals", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_mark_edit_keep_show_list_and_run(
    database: Database, database_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    env = {**os.environ, "NIGHTOWL_DATA_DIR": str(data_dir), "NIGHTOWL_DATABASE_URL": database_url}
    _, conversation, message = _failed_turn(database, load_key(data_dir))

    marked = _cli(env, "mark", conversation, message, "Say the balance: 1,240.00 EUR")
    assert marked.returncode == 0, marked.stderr
    case_id = marked.stdout.split()[2].rstrip(":")
    assert case_id.startswith("case_")

    bad = _cli(env, "edit", case_id, "--checker", '{"require_text": ["("]}')
    assert bad.returncode == 2 and "bad regular expression" in bad.stderr
    not_json = _cli(env, "edit", case_id, "--checker", "{")
    assert not_json.returncode == 2 and "not JSON" in not_json.stderr
    kept = _cli(
        env, "edit", case_id, "--checker", '{"require_text": ["1,240"]}', "--status", "kept"
    )
    assert kept.returncode == 0, kept.stderr

    shown = json.loads(_cli(env, "show", case_id).stdout)
    assert shown["status"] == "kept" and shown["checker"]["require_text"] == ["1,240"]
    assert SECRET not in json.dumps(shown)
    assert json.loads(_cli(env, "show", "timer-set").stdout)["id"] == "shipped:timer-set"
    listed = json.loads(_cli(env, "list", "--json").stdout)
    assert {"id": case_id, "status": "kept"}.items() <= listed[0].items()
    assert len(listed) == 36

    script = tmp_path / "wrong.json"
    script.write_text(json.dumps({"replies": [say(WRONG)]}))
    ran = _cli(env, "run", "--case", case_id, "--model", f"scripted:{script}", "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert (report["cases"], report["passed"]) == (1, 0)
    assert report["results"][0]["sent"] == [WRONG]
    missing = _cli(env, "run", "--case", "nope", "--model", f"scripted:{script}")
    assert missing.returncode == 2 and "no case ['nope']" in missing.stderr
