"""Helpers on the local model: does the report carry what the helper found?

A scripted main agent hands one task to a helper on the real local model
(`NIGHTOWL_HELPER_MODEL=local`); the task needs a tool (shell, read_file or search_files) on
files holding a value made up for the run, and the helper's report must carry that value.

Tasks come in three sets, so tuning to what is measured shows up as a gap between them:
`tuned` is what the suite's test runs (tests/models/test_local_model.py); `seen` are tasks
whose failures were read while changing nightowl (they shaped those changes); `held_out` were
written with them and never looked at while changing anything. Move a held-out task to `seen`
once its failures shape a change, and write new held-out ones.

Prints one JSON object: per task the runs and how many reports carried the value, each set's
rate, and the reports that missed (the helper's steps of a miss go to stderr). Run
`python bench/local_helper.py [--runs N] [--only NAME]`.
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
    half: str  # tuned | seen | held_out
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


def _ticket(rng: random.Random) -> tuple[str, dict[str, str], str]:
    value = f"{rng.choice(WORDS)}-{rng.randint(1000, 9999)}"
    return (
        "Run `cat ticket.txt` with the shell tool, then report exactly what it printed.",
        {"ticket.txt": f"{value}\n"},
        value,
    )


def _head(rng: random.Random) -> tuple[str, dict[str, str], str]:
    first = f"call {rng.choice(WORDS).title()} about invoice {rng.randint(100, 999)}"
    rest = [f"file the {w} report" for w in rng.sample(WORDS, 4)]
    return (
        "What is the first item in todo/queue.txt? Use the shell tool and report it.",
        {"todo/queue.txt": "\n".join([first, *rest]) + "\n"},
        first,
    )


def _search(rng: random.Random) -> tuple[str, dict[str, str], str]:
    names = [f"projects/{w}.md" for w in rng.sample(WORDS, 5)]
    target = rng.choice(names)
    files = {n: f"# {n}\n\nNotes about the garden.\n" for n in names}
    files[target] = f"# {target}\n\nThe kestrel nest box goes up in March.\n"
    return (
        "Which file in the projects folder mentions the kestrel? Use search_files and report "
        "its name.",
        files,
        target.split("/")[-1].removesuffix(".md"),
    )


def _largest(rng: random.Random) -> tuple[str, dict[str, str], str]:
    sizes = rng.sample(range(200, 5000), 4)
    names = [f"downloads/{w}.bin" for w in rng.sample(WORDS, 4)]
    files = {n: "x" * size for n, size in zip(names, sizes, strict=True)}
    largest = names[sizes.index(max(sizes))]
    return (
        "Find the largest file in downloads (the shell's `ls -S downloads` lists them by size) "
        "and report its name.",
        files,
        largest.split("/")[-1].removesuffix(".bin"),
    )


def _words(rng: random.Random) -> tuple[str, dict[str, str], str]:
    n = rng.randint(7, 40)
    return (
        "How many words are in motto.txt? Use the shell tool (`wc -w`) and report the number.",
        {"motto.txt": " ".join(rng.choice(WORDS) for _ in range(n)) + "\n"},
        str(n),
    )


def _listing(rng: random.Random) -> tuple[str, dict[str, str], str]:
    names = [f"inbox/{w}-{rng.randint(10, 99)}.eml" for w in rng.sample(WORDS, 3)]
    return (
        "Which files are in the inbox folder? Use list_files and report their names.",
        {n: "Subject: hello\n" for n in names},
        names[-1].split("/")[-1].removesuffix(".eml"),
    )


def _log(rng: random.Random) -> tuple[str, dict[str, str], str]:
    times = sorted(f"{h:02d}:{rng.randint(10, 59)}" for h in rng.sample(range(0, 23), 5))
    lines = [
        f"2026-12-05 {t} backup {'succeeded' if i % 2 == 0 else 'failed'}"
        for i, t in enumerate(times)
    ]
    last = [t for i, t in enumerate(times) if i % 2 == 0][-1]
    return (
        "When did the backup last succeed? The log is logs/backup.log: search it for "
        "'succeeded' (search_files) and report the time of the last one.",
        {"logs/backup.log": "\n".join(lines) + "\n"},
        last,
    )


TASKS = [
    # What the suite's test runs. A credential's look: with the fence's reminder sentence in
    # sight the model often kept the value back ("the file holds the owner's access token").
    Task("cat a token", "tuned", _token),
    Task("cat a ticket", "seen", _ticket),
    Task("count lines", "seen", _count),
    Task("grep a code", "seen", _grep),
    Task("read a date", "seen", _read),
    Task("add numbers", "seen", _sum),
    Task("first of a list", "seen", _head),
    Task("search a word", "seen", _search),
    Task("largest file", "seen", _largest),
    Task("count words", "held_out", _words),
    Task("list a folder", "held_out", _listing),
    Task("last success in a log", "held_out", _log),
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
                (home / name).parent.mkdir(parents=True, exist_ok=True)
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
    for half in ("tuned", "seen", "held_out"):
        mine = [r for r in result.values() if r["half"] == half]
        runs = sum(int(str(r["runs"])) for r in mine)
        if runs:
            halves[half] = round(sum(int(str(r["carried"])) for r in mine) / runs, 3)
    print(json.dumps({"tasks": result, "rate": halves, "missed": missed}, indent=2))


if __name__ == "__main__":
    main()
