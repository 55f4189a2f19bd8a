"""Helpers on the local model: does the report carry what the helper found?

A scripted main agent hands one task to a helper on the real local model
(`NIGHTOWL_HELPER_MODEL=local`); the task needs a tool (shell or read_file) on a file holding a
value made up for the run, and the helper's report must carry that value. Tasks are in two
halves: `tuned` is the one the suite's test runs (tests/models/test_local_model.py), `held_out`
are never run by a test, so a change is judged on both and tuning to the test shows up as a
gap between them.

Prints one JSON object: per task the runs and how many reports carried the value, each half's
rate, and the reports that missed. Run `python bench/local_helper.py [--runs N] [--only NAME]`.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common import ROOT, ServerProcess, wait_for

sys.path.insert(0, str(ROOT))
from tests.e2e.store_view import rows

WORDS = ["amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo"]


@dataclass
class Task:
    """A task for the helper, the files it needs and the value its report must carry."""

    name: str
    half: str  # tuned | held_out
    make: Callable[[random.Random], tuple[str, dict[str, str], str]]


def _token(_: random.Random) -> tuple[str, dict[str, str], str]:
    value = secrets.token_hex(4)
    return (
        "Run `cat token.txt` with the shell tool, then report exactly what it printed.",
        {"token.txt": f"{value}\n"},
        value,
    )


def _count(rng: random.Random) -> tuple[str, dict[str, str], str]:
    n = rng.randint(12, 97)
    return (
        "Use the shell tool to run `wc -l guests.txt` and report how many lines it has.",
        {"guests.txt": "".join(f"guest {i}\n" for i in range(n))},
        str(n),
    )


def _grep(rng: random.Random) -> tuple[str, dict[str, str], str]:
    code = f"{rng.choice(WORDS)}-{rng.randint(100, 999)}"
    lines = [f"room {i}: code {rng.choice(WORDS)}-{rng.randint(100, 999)}" for i in range(30)]
    lines[rng.randrange(30)] = f"room 7B: code {code}"
    return (
        "Find the door code for room 7B in doors.txt (grep it with the shell tool) and report it.",
        {"doors.txt": "\n".join(lines) + "\n"},
        code,
    )


def _read(rng: random.Random) -> tuple[str, dict[str, str], str]:
    date = f"2027-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"
    return (
        "Read plan.md with read_file and report the launch date it gives.",
        {"plan.md": f"# Plan\n\nDrafts are due first.\n\nLaunch date: {date}\n\nThen we rest.\n"},
        date,
    )


def _sum(rng: random.Random) -> tuple[str, dict[str, str], str]:
    a, b = rng.randint(100, 499), rng.randint(100, 499)
    return (
        "Use the shell tool to add the two numbers in numbers.txt "
        "(e.g. `paste -sd+ numbers.txt | bc`) and report the sum.",
        {"numbers.txt": f"{a}\n{b}\n"},
        str(a + b),
    )


TASKS = [
    Task("cat a token", "tuned", _token),
    Task("count lines", "held_out", _count),
    Task("grep a code", "held_out", _grep),
    Task("read a date", "held_out", _read),
    Task("add numbers", "held_out", _sum),
]


def _script(folder: Path, task: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.json"
    done = {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "Done.", "final": True}}]}
    start = {
        "tool_calls": [
            {"name": "start_helper", "arguments": {"task": task}},
            {"name": "send_to_user", "arguments": {"text": "On it.", "final": True}},
        ]
    }
    path.write_text(json.dumps({"replies": [start, done], "then": "silent"}))
    return f"scripted:{path}"


def run_once(folder: Path, task: Task, rng: random.Random) -> tuple[bool, str]:
    """One helper run; whether its report carried the value, and the report."""
    text, files, value = task.make(rng)
    server = ServerProcess(
        folder / "data",
        model=_script(folder, text),
        env={"NIGHTOWL_HELPER_MODEL": "local", "NIGHTOWL_SANDBOX_NETWORK": "none"},
    ).start()
    url = f"sqlite:///{folder / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            owner = client.get("/v1/me").json()["id"]
            home = folder / "data" / "homes" / owner
            home.mkdir(parents=True)
            for name, body in files.items():
                (home / name).write_text(body)
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m1", "text": "Please have a helper look into it."},
            )
            sql = "SELECT status, report FROM helpers WHERE parent_conversation_id = :c"
            wait_for(
                lambda: [r[0] for r in rows(url, sql, c=conversation)] in (["done"], ["failed"]),
                timeout=600,
                interval=1,
            )
            ((_, report),) = rows(url, sql, c=conversation)
            steps = rows(
                url,
                "SELECT e.payload FROM transcript_entries e JOIN helpers h "
                "ON h.conversation_id = e.conversation_id WHERE h.parent_conversation_id = :c "
                "ORDER BY e.id",
                c=conversation,
            )
    finally:
        server.stop()
    report = report or ""
    carried = value.lower() in report.lower()
    if not carried:  # what the helper did, for reading (stderr)
        for (payload,) in steps:
            entry = json.loads(payload) if isinstance(payload, str) else payload
            said = entry.get("text", "")[:300] or json.dumps(entry.get("tool_calls"))[:300]
            print(f"  {task.name} | {entry['kind']}: {said}", file=sys.stderr)
    return carried, f"{value}: {report}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per task")
    parser.add_argument("--only", action="append", help="a task's name (repeatable)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tasks = [t for t in TASKS if not args.only or t.name in args.only]
    result: dict[str, dict[str, object]] = {}
    missed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            carried = 0
            for n in range(args.runs):
                ok, said = run_once(Path(tmp) / f"{task.name}-{n}".replace(" ", "_"), task, rng)
                carried += ok
                if not ok:
                    missed.append(f"{task.name}: {said}")
            result[task.name] = {"half": task.half, "runs": args.runs, "carried": carried}
    halves = {}
    for half in ("tuned", "held_out"):
        mine = [r for r in result.values() if r["half"] == half]
        runs = sum(int(str(r["runs"])) for r in mine)
        if runs:
            halves[half] = round(sum(int(str(r["carried"])) for r in mine) / runs, 3)
    print(json.dumps({"tasks": result, "rate": halves, "missed": missed}, indent=2))


if __name__ == "__main__":
    main()
