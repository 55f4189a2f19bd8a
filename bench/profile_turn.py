"""Where a worker's CPU goes in one scripted turn, by part of the server and by library.

One `nightowl serve` worker on PostgreSQL (`--sqlite` for SQLite), a scripted model that answers
every turn after `MODEL_DELAY_S` with one `send_to_user` (as in bench/scale.py); `TURNS`
one-message turns, each in its own conversation, posted over HTTP to the worker after `WARM_UP`
unprofiled ones. The worker's CPU (utime + stime from /proc) over the profiled turns, per turn,
is `worker_cpu_ms_per_turn`; py-spy samples the worker's threads while they run (not while
they wait) and each sample is charged to:

- a part (`by_part`): the outermost frame an `ANCHORS` entry claims (a thread's or a
  background task's root: DBOS's queue poller, the listeners, the memory pass), else the
  innermost frame one of `PARTS` claims (so the outbox's write counts for the outbox, not for
  the store module it calls); what neither claims is `other` (the event loop, idle threads);
- a library (`by_library`): the innermost frame outside the interpreter's own modules that
  belongs to one of `LIBRARIES`, else `nightowl` (our own Python) or `python` (the rest).

Each table gives milliseconds per turn: the turn's CPU split in the samples' proportions.
Prints one JSON object; `--markdown` prints the tables too (docs/operations.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))  # importable as bench.profile_turn too

from common import ServerProcess, fresh_database, write_script
from scale import _add_conversations, _cpu_seconds, _pid, _post_all, _start, _wait_done

MODEL_DELAY_S = 0.2
WARM_UP = 30
TURNS = 300
RATE_HZ = 200

# (part, where: a path fragment, optionally "path:name" where name is one of the dotted
# segments of the frame's function, so a step's inner closure counts for its step).
# The outermost anchor wins over everything under it.
ANCHORS: list[tuple[str, str]] = [
    ("DBOS: queue polling", "dbos/_queue.py"),
    (
        "notifications: changes, pushes, listeners",
        "dbos/_sys_db_postgres.py:_notification_listener",
    ),
    ("notifications: changes, pushes, listeners", "dbos/_sys_db_postgres.py:run_notifier"),
    ("notifications: changes, pushes, listeners", "nightowl/store/changes.py"),
    ("notifications: changes, pushes, listeners", "nightowl/channels/webpush.py"),
    ("memory pass", "nightowl/memory/memory_pass.py"),
    ("memory pass", "nightowl/engine/memory_pass"),
    ("heartbeat, warming, compaction checks", "nightowl/engine/heartbeat.py"),
    ("heartbeat, warming, compaction checks", "nightowl/engine/warming.py"),
    ("heartbeat, warming, compaction checks", "nightowl/engine/compaction.py"),
]
# The innermost match wins.
PARTS: list[tuple[str, str]] = [
    ("http: ingest (uvicorn, starlette, FastAPI, the edge)", "uvicorn/"),
    ("http: ingest (uvicorn, starlette, FastAPI, the edge)", "starlette/"),
    ("http: ingest (uvicorn, starlette, FastAPI, the edge)", "fastapi/"),
    ("http: ingest (uvicorn, starlette, FastAPI, the edge)", "nightowl/api/"),
    ("http: ingest (uvicorn, starlette, FastAPI, the edge)", "nightowl/app.py"),
    ("router: store the message, queue the turn", "nightowl/router/"),
    ("DBOS: queue polling", "nightowl/engine/queue_nudge.py"),
    ("DBOS: workflow start, step and workflow records", "dbos/_core.py"),
    ("DBOS: workflow start, step and workflow records", "dbos/_sys_db.py"),
    ("DBOS: workflow start, step and workflow records", "dbos/_dbos.py"),
    ("DBOS: workflow start, step and workflow records", "nightowl/engine/durable.py"),
    ("DBOS: workflow start, step and workflow records", "nightowl/engine/dispatch.py"),
    ("turn: take the batch", "nightowl/engine/turn.py:take_batch"),
    ("turn: take the batch", "nightowl/store/turns.py:claim_batch"),
    ("turn: build the request", "nightowl/memory/context.py"),
    ("turn: build the request", "nightowl/harness/"),
    ("turn: build the request", "nightowl/engine/prompt"),
    ("turn: model call and its record", "nightowl/engine/model_calls.py"),
    ("turn: model call and its record", "nightowl/models/"),
    ("turn: the gate", "nightowl/engine/gate.py"),
    ("turn: the gate", "nightowl/safety/"),
    ("turn: tool call and its record", "nightowl/engine/tool_calls.py"),
    ("turn: tool call and its record", "nightowl/tools/"),
    ("turn: the outbox", "nightowl/store/outbox.py"),
    ("turn: the agent loop's own steps", "nightowl/engine/agent_loop.py"),
    ("turn: the agent loop's own steps", "nightowl/engine/recorded_steps.py"),
    ("turn: finish", "nightowl/engine/turn.py:record_finish"),
    ("turn: finish", "nightowl/engine/turn.py:say_how_it_ended"),
    ("notifications: changes, pushes, listeners", "nightowl/store/changes.py"),
    ("notifications: changes, pushes, listeners", "nightowl/store/push.py"),
    ("notifications: changes, pushes, listeners", "nightowl/api/events.py"),
    ("tracing", "nightowl/tracing/"),
    ("tracing", "opentelemetry/"),
    ("logging", "nightowl/logs.py"),
    ("logging", "/logging/"),
    ("metrics", "nightowl/metrics.py"),
    ("metrics", "prometheus_client/"),
]
LIBRARIES: list[tuple[str, str]] = [
    ("sqlalchemy", "sqlalchemy/"),
    ("psycopg (PostgreSQL driver)", "psycopg"),
    ("sqlite3", "sqlite3/"),
    ("dbos", "dbos/"),
    ("pydantic", "pydantic"),
    ("http stack (uvicorn, starlette, fastapi, h11, httptools)", "uvicorn/"),
    ("http stack (uvicorn, starlette, fastapi, h11, httptools)", "starlette/"),
    ("http stack (uvicorn, starlette, fastapi, h11, httptools)", "fastapi/"),
    ("http stack (uvicorn, starlette, fastapi, h11, httptools)", "h11/"),
    ("json", "/json/"),
    ("logging", "/logging/"),
    ("asyncio", "/asyncio/"),
    ("threading, queue, concurrent", "/threading.py"),
    ("threading, queue, concurrent", "/queue.py"),
    ("threading, queue, concurrent", "/concurrent/"),
    ("opentelemetry", "opentelemetry/"),
    ("prometheus_client", "prometheus_client/"),
]
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")


def _frames(stack: str) -> list[tuple[str, str]]:
    """(path, function) of each frame of a py-spy raw stack, outermost first."""
    found = []
    for frame in stack.split(";"):
        match = _FRAME.match(frame.strip())
        if match:
            found.append((match["path"], match["function"]))
    return found


def _matches(frame: tuple[str, str], where: str) -> bool:
    path, function = frame
    fragment, _, wanted = where.partition(":")
    return fragment in path and (not wanted or wanted in function.split("."))


def part_of(frames: list[tuple[str, str]]) -> str:
    """The part a sample is charged to: the outermost anchor, else the innermost frame some
    part claims."""
    for frame in frames:
        for part, where in ANCHORS:
            if _matches(frame, where):
                return part
    for frame in reversed(frames):
        for part, where in PARTS:
            if _matches(frame, where):
                return part
    return "other"


def library_of(frames: list[tuple[str, str]]) -> str:
    """The library a sample runs in: the innermost frame some library claims."""
    for frame in reversed(frames):
        for library, where in LIBRARIES:
            if _matches(frame, where):
                return library
        if "nightowl/" in frame[0]:
            return "nightowl"
    return "python"


def charge(samples: dict[str, int], cpu_ms_per_turn: float) -> dict[str, dict[str, float]]:
    """Both tables from py-spy's raw stacks (`stack -> count`), in ms per turn."""
    parts: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    for stack, count in samples.items():
        frames = _frames(stack)
        parts[part_of(frames)] += count
        libraries[library_of(frames)] += count
    total = sum(samples.values()) or 1

    def table(counts: Counter[str]) -> dict[str, float]:
        return {
            name: round(count / total * cpu_ms_per_turn, 2) for name, count in counts.most_common()
        }

    return {"by_part": table(parts), "by_library": table(libraries)}


def _raw(path: Path) -> dict[str, int]:
    samples: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples[stack] = samples.get(stack, 0) + int(count)
    return samples


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: `pip install 'py-spy>=0.4,<0.5'`")
    return found


def measure(backend: str, folder: Path, turns: int) -> dict[str, Any]:
    reply = {
        "delay": MODEL_DELAY_S,
        "tool_calls": [{"name": "send_to_user", "arguments": {"text": "ok", "final": True}}],
    }
    model = write_script(folder / "script.json", [reply])
    with fresh_database(backend, folder) as url:
        worker = ServerProcess(folder / "w", url, model=model, executor_id="profile-w")
        engine = create_engine(url)
        try:
            _start([worker])
            _post_all([worker], _add_conversations(url, WARM_UP, "warm"), None)
            _wait_done(engine, "warm", WARM_UP)
            conversations = _add_conversations(url, turns, "profiled")
            time.sleep(2.0)  # the warm-up's memory passes and compaction checks settle
            raw = folder / "profile.txt"
            command = [_py_spy(), "record", "--pid", str(_pid(worker)), "--gil"]
            command += ["--rate", str(RATE_HZ), "--format", "raw", "--output", str(raw)]
            spy = subprocess.Popen(
                [*command, "--nonblocking"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(1.0)  # attached
            cpu_before = _cpu_seconds(_pid(worker))
            _post_all([worker], conversations, None)
            _wait_done(engine, "profiled", turns)
            cpu_ms = (_cpu_seconds(_pid(worker)) - cpu_before) * 1000 / turns
            spy.send_signal(2)  # SIGINT: py-spy writes what it sampled
            _, problems = spy.communicate(timeout=120)
            if not raw.exists():
                raise RuntimeError(f"py-spy wrote no profile: {problems.decode()[-500:]}")
            samples = _raw(raw)
        finally:
            worker.stop()
            engine.dispose()
    return {
        "worker_cpu_ms_per_turn": round(cpu_ms, 1),
        "samples": sum(samples.values()),
        **charge(samples, cpu_ms),
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = []
    for table in ("by_part", "by_library"):
        lines += [f"| {table.replace('_', ' ')} | ms per turn |", "|---|---:|"]
        lines += [f"| {name} | {ms} |" for name, ms in result[table].items()]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    backend = "sqlite" if "--sqlite" in sys.argv else "postgresql"
    turns = 40 if "--quick" in sys.argv else TURNS
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(keep or scratch)  # --keep DIR: the raw profile stays in DIR/profile.txt
        folder.mkdir(parents=True, exist_ok=True)
        result = {"backend": backend, "turns": turns, **measure(backend, folder, turns)}
    result["settings"] = {
        "model_delay_s": MODEL_DELAY_S,
        "warm_up_turns": WARM_UP,
        "sample_rate_hz": RATE_HZ,
        "cores": os.cpu_count(),
    }
    result["target"] = {"worker_cpu_ms_per_turn": 30}
    print(json.dumps(result, indent=2))
    if "--markdown" in sys.argv:
        print(_markdown(result))


if __name__ == "__main__":
    main()
