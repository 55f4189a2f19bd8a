"""A crash campaign: a real server SIGKILLed at random moments while turns run, then checked.

Several conversations are driven at once, each by an owner who sends a task, waits for the
turn's last message and sends the next (no preemption: every turn should run to its end). The
scripted model's turn for task *i* sends three messages, writes a note and sets a timer. A
killer SIGKILLs the server at random moments — while turns run, and sometimes while it is
still starting — and starts it again. Owners retry a send whose answer was lost with the same
client id, and sometimes send it twice. At the end every conversation must read exactly as the
script says (nothing lost, nothing doubled), and each note and timer must exist once.

`run_campaign` is used by the suite (a short run per database) and by `make crash` (a long one;
the seed is printed, and the same seed replays the same kill schedule).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.store_view import rows
from tests.server import ServerProcess, write_script

MIN_TASKS = 5  # each owner sends at least this many tasks
CONVERSATIONS = 3


def _expected(task: int) -> list[str]:
    return [f"task {task}, part {part}" for part in ("a", "b", "c")]


def campaign_script(tasks: int) -> list[dict[str, Any]]:
    """Each conversation's replies (the scripted model counts per conversation): three model
    calls per task."""
    replies: list[dict[str, Any]] = []
    for task in range(tasks):
        a, b, c = _expected(task)
        replies += [
            {
                "delay": 0.15,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": a}},
                    {
                        "name": "write_note",
                        "arguments": {"text": f"note {a}", "expires_in_minutes": 600},
                    },
                ],
            },
            {
                "delay": 0.15,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": b}},
                    {"name": "set_timer", "arguments": {"seconds": 86400, "note": f"timer {b}"}},
                ],
            },
            {
                "delay": 0.15,
                "tool_calls": [{"name": "send_to_user", "arguments": {"text": c, "final": True}}],
            },
        ]
    return replies


@dataclass
class CampaignResult:
    """What happened and what was wrong (empty `problems` means it passed)."""

    seed: int
    kills: int
    kills_while_starting: int
    tasks_answered: int
    duplicate_sends: int
    seconds: float
    problems: list[str] = field(default_factory=list)


class _Owner(threading.Thread):
    """Sends one conversation's tasks one after another, retrying across crashes."""

    def __init__(
        self,
        server: ServerProcess,
        token: str,
        conversation_id: str,
        index: int,
        rng: Any,
        *,
        max_tasks: int,
        killing: threading.Event,
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.token, self.conversation_id = server, token, conversation_id
        self.index, self.rng = index, rng
        self.max_tasks, self.killing = max_tasks, killing
        self.tasks_sent = 0
        self.duplicate_sends = 0
        self.error: str | None = None

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        try:
            return httpx.request(
                method,
                f"{self.server.url}{path}",
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=5,
                **kwargs,
            )
        except httpx.TransportError:
            return None  # the server is down: try again shortly

    def _send(self, task: int) -> None:
        body = {"client_id": f"c{self.index}-t{task}", "text": f"task {task}"}
        path = f"/v1/conversations/{self.conversation_id}/messages"
        while True:
            answer = self._request("POST", path, json=body)
            if answer is not None and answer.status_code in (200, 201):
                break
            time.sleep(0.1)
        if self.rng.random() < 0.3:  # the app did not see the answer: it sends again
            again = self._request("POST", path, json=body)
            if again is not None and again.status_code not in (200, 201):
                raise AssertionError(f"a repeated send answered {again.status_code}")
            self.duplicate_sends += 1

    def _answered(self, task: int) -> bool:
        answer = self._request("GET", f"/v1/conversations/{self.conversation_id}/messages")
        if answer is None or answer.status_code != 200:
            return False
        bodies = [m["body"] for m in answer.json()["messages"]]
        return _expected(task)[-1] in bodies

    def run(self) -> None:
        try:
            # New tasks keep coming while the killer works (so every kill lands on live
            # turns), at least MIN_TASKS of them.
            for task in range(self.max_tasks):
                if task >= MIN_TASKS and not self.killing.is_set():
                    break
                self.tasks_sent = task + 1
                self._send(task)
                deadline = time.monotonic() + 600  # a bound for a loaded machine, not a speed
                while not self._answered(task):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"task {task} was never answered")
                    time.sleep(0.1)
        except Exception as error:  # reported by the campaign
            self.error = f"conversation {self.index}: {error}"


def run_campaign(
    tmp_path: Path, backend_url: str, *, kills: int, seed: int | None = None
) -> CampaignResult:
    """Run the campaign against a fresh server on `backend_url`; what it found."""
    seed = random.randrange(2**32) if seed is None else seed
    print(f"crash campaign: seed {seed}, {kills} kills", flush=True)
    rng = random.Random(seed)
    started = time.monotonic()
    max_tasks = max(MIN_TASKS, kills)  # never runs out while kills remain
    model = write_script(tmp_path / "script.json", campaign_script(max_tasks))
    server = ServerProcess(
        tmp_path / "data",
        backend_url,
        model=model,
        env={
            "NIGHTOWL_MEMORY_PASS": "off",
            # Parking a turn after repeated deaths is its own test: here kills are many on
            # purpose, and every turn must finish.
            "NIGHTOWL_MAX_TURN_RECOVERIES": "1000",
        },
    ).start()
    try:
        token = server.token
        conversations = []
        with server.client() as client:
            for index in range(CONVERSATIONS):
                made = client.post("/v1/conversations", json={"title": f"campaign {index}"})
                conversations.append(made.json()["id"])
        killing = threading.Event()
        killing.set()
        owners = [
            _Owner(
                server,
                token,
                conversation,
                index,
                random.Random(rng.random()),
                max_tasks=max_tasks,
                killing=killing,
            )
            for index, conversation in enumerate(conversations)
        ]
        for owner in owners:
            owner.start()
        while_starting = done = 0
        for _ in range(kills):
            if not any(owner.is_alive() for owner in owners):
                break  # an owner failed (each reports why)
            if rng.random() < 0.2:
                # Kill it while it starts: migrations, DBOS launch, recovery.
                server.kill()
                server.launch()
                time.sleep(rng.uniform(0.0, 2.0))
                while_starting += 1
            else:
                time.sleep(rng.uniform(0.2, 2.0))
            server.kill()
            server.start()
            done += 1
        killing.clear()
        for owner in owners:
            owner.join(timeout=700)
        problems = [owner.error for owner in owners if owner.error]
        if done < kills:
            problems.append(f"only {done} of {kills} kills were made")
        problems += _check_store(server, backend_url, conversations, [o.tasks_sent for o in owners])
    finally:
        server.stop()  # also when the campaign itself fails
    return CampaignResult(
        seed=seed,
        kills=done,
        kills_while_starting=while_starting,
        tasks_answered=sum(owner.tasks_sent for owner in owners),
        duplicate_sends=sum(owner.duplicate_sends for owner in owners),
        seconds=round(time.monotonic() - started, 1),
        problems=problems,
    )


def _unfinished_turns(backend_url: str, conversation: str, wait: float) -> list[Any]:
    """The conversation's turns still queued or running after `wait` seconds (none: done)."""
    deadline = time.monotonic() + wait
    while True:
        pending = rows(
            backend_url,
            "SELECT id, status, activity, batch_first_seq, batch_last_seq FROM turns "
            "WHERE conversation_id = :c AND status IN ('queued', 'running')",
            c=conversation,
        )
        if not pending or time.monotonic() > deadline:
            return [tuple(row) for row in pending]
        time.sleep(0.05)


def _check_store(
    server: ServerProcess, backend_url: str, conversations: list[str], tasks: list[int]
) -> list[str]:
    problems = []
    with server.client() as client:
        for index, conversation in enumerate(conversations):
            unfinished = _unfinished_turns(backend_url, conversation, wait=180)
            if unfinished:
                problems.append(f"conversation {index} has unfinished turns {unfinished}")
            messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            seen = [(m["role"], m["body"]) for m in messages]
            wanted: list[tuple[str, str]] = []
            for task in range(tasks[index]):
                wanted.append(("user", f"task {task}"))
                wanted += [("agent", text) for text in _expected(task)]
            if seen != wanted:
                problems.append(f"conversation {index} reads {seen}, expected {wanted}")
            notes = [
                r[0]
                for r in rows(
                    backend_url,
                    "SELECT text FROM memory_notes WHERE conversation_id = :c",
                    c=conversation,
                )
            ]
            wanted_notes = [f"note {_expected(task)[0]}" for task in range(tasks[index])]
            if sorted(notes) != sorted(wanted_notes):
                problems.append(f"conversation {index} has notes {sorted(notes)}")
            timers = [
                r[0]
                for r in rows(
                    backend_url,
                    "SELECT note FROM timers WHERE conversation_id = :c",
                    c=conversation,
                )
            ]
            wanted_timers = [f"timer {_expected(task)[1]}" for task in range(tasks[index])]
            if sorted(timers) != sorted(wanted_timers):
                problems.append(f"conversation {index} has timers {sorted(timers)}")
    return problems
