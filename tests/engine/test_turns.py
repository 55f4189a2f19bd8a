"""Turns end to end through the real server with the scripted model (on SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.fake_providers import FakeProvider, openai_reply
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow


def _say(text: str, final: bool = False) -> dict[str, Any]:
    return {"name": "send_to_user", "arguments": {"text": text, "final": final}}


def _run_turn(
    server: ServerProcess, url: str, text: str = "go"
) -> tuple[str, list[dict[str, Any]]]:
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m", "text": text}
        )
        wait_for(
            lambda: (
                rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
                in ([("done",)], [("failed",)])
            ),
            timeout=60,
        )
        messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
    return conversation, messages


def _model_calls(url: str, conversation: str) -> int:
    return len(
        rows(
            url,
            "SELECT id FROM model_calls WHERE conversation_id = :c AND step >= 0",
            c=conversation,
        )
    )


@pytest.fixture
def scripted(tmp_path: Path, database_url: str) -> Any:
    servers: list[ServerProcess] = []

    def start(replies: list[dict[str, Any]], **env: str) -> ServerProcess:
        model = write_script(tmp_path / f"script{len(servers)}.json", replies)
        server = ServerProcess(tmp_path / f"data{len(servers)}", database_url, model=model, env=env)
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


def test_two_tools_then_send_to_user(scripted: Any, database_url: str) -> None:
    server = scripted(
        [
            {
                "text": "I need to wait",
                "tool_calls": [{"name": "load_tools", "arguments": {"query": "wait"}}],
            },
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": 0.1}}]},
            {"text": "private reasoning", "tool_calls": [_say("All **done**")]},
        ]
    )
    conversation, messages = _run_turn(server, database_url)
    assert [(m["role"], m["body"]) for m in messages] == [("user", "go"), ("agent", "All **done**")]
    tools = [
        r[0]
        for r in rows(
            database_url, "SELECT tool FROM tool_runs WHERE conversation_id = :c", c=conversation
        )
    ]
    assert sorted(tools) == ["load_tools", "send_to_user", "wait"]
    # Non-final send: the model is asked once more and ends silently.
    assert _model_calls(database_url, conversation) == 4
    # The model's own text is kept privately with the turn, never shown.
    private = rows(
        database_url,
        "SELECT payload FROM transcript_entries WHERE conversation_id = :c",
        c=conversation,
    )
    assert any("private reasoning" in str(p[0]) for p in private)
    assert all("private reasoning" not in m["body"] for m in messages)


def test_a_silent_turn_sends_nothing(scripted: Any, database_url: str) -> None:
    server = scripted([{"text": "nothing worth saying"}])
    conversation, messages = _run_turn(server, database_url)
    assert [m["role"] for m in messages] == ["user"]
    assert _model_calls(database_url, conversation) == 1


def test_final_send_ends_the_turn_without_another_model_call(
    scripted: Any, database_url: str
) -> None:
    server = scripted([{"tool_calls": [_say("here you go", final=True)]}])
    conversation, messages = _run_turn(server, database_url)
    assert [m["body"] for m in messages] == ["go", "here you go"]
    assert _model_calls(database_url, conversation) == 1


def test_runaway_guard_stops_a_loop_with_one_message(scripted: Any, database_url: str) -> None:
    server = scripted([])
    script = {
        "replies": [{"tool_calls": [{"name": "wait", "arguments": {"seconds": 0.01}}]}],
        "then": "repeat_last",
    }
    Path(server.env["NIGHTOWL_MODEL"].removeprefix("scripted:")).write_text(
        __import__("json").dumps(script)
    )
    conversation, messages = _run_turn(server, database_url)
    notices = [m for m in messages if m["role"] != "user"]
    assert len(notices) == 1
    assert "same arguments 4 times" in notices[0]["body"]
    assert (
        len(
            rows(
                database_url, "SELECT id FROM tool_runs WHERE conversation_id = :c", c=conversation
            )
        )
        == 4
    )


def test_invalid_arguments_and_unknown_tools_come_back_as_errors_for_the_agent(
    scripted: Any, database_url: str
) -> None:
    server = scripted(
        [
            {"tool_calls": [{"name": "teleport", "arguments": {}}]},
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": -5}}]},
            {"tool_calls": [_say("recovered", final=True)]},
        ]
    )
    conversation, messages = _run_turn(server, database_url)
    results = [
        r[0]
        for r in rows(
            database_url,
            "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
            c=conversation,
        )
        if '"tool_result"' in str(r[0]) or "tool_result" in str(r[0])
    ]
    texts = " ".join(str(r) for r in results)
    assert "There is no tool named 'teleport'" in texts and "load_tools" in texts
    assert "arguments for wait are invalid" in texts and "greater than 0" in texts
    assert messages[-1]["body"] == "recovered"


def test_a_timer_wakes_the_conversation_even_across_a_restart(
    scripted: Any, database_url: str
) -> None:
    server = scripted(
        [
            {
                "tool_calls": [
                    {"name": "set_timer", "arguments": {"seconds": 4, "note": "check the oven"}},
                    _say("Timer set", final=True),
                ]
            },
            {"tool_calls": [_say("Reminder: check the oven", final=True)]},
        ]
    )
    conversation, _ = _run_turn(server, database_url)
    # The server knows what will wake the conversation, and when (compaction waits for it).
    pending = rows(
        database_url, "SELECT note FROM timers WHERE conversation_id = :c", c=conversation
    )
    assert pending == [("check the oven",)]
    server.kill()
    server.start()

    def reminded() -> list[str]:
        with server.client() as client:
            bodies = [
                m["body"]
                for m in client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            ]
        return bodies if "Reminder: check the oven" in bodies else []

    bodies = wait_for(reminded, timeout=40)
    assert bodies == ["go", "Timer set", "Timer due: check the oven", "Reminder: check the oven"]


def test_a_missing_model_script_tells_the_owner_once(scripted: Any, database_url: str) -> None:
    server = scripted([])
    Path(server.env["NIGHTOWL_MODEL"].removeprefix("scripted:")).unlink()
    conversation, messages = _run_turn(server, database_url)
    assert len(messages) == 2 and "can't think" in messages[1]["body"]
    assert rows(
        database_url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation
    ) == [("failed",)]


def test_provider_overload_is_retried_with_backoff(tmp_path: Path, database_url: str) -> None:
    with FakeProvider() as fake:
        fake.answers.append((429, {"error": {"message": "slow down"}}))
        fake.answers.append(
            (200, openai_reply(None, ("send_to_user", '{"text": "made it", "final": true}')))
        )
        server = ServerProcess(
            tmp_path / "data", database_url, model=f"openai-compatible:{fake.url}/v1#fake"
        ).start()
        try:
            conversation, messages = _run_turn(server, database_url)
        finally:
            server.stop()
    assert messages[-1]["body"] == "made it"
    errors = rows(
        database_url,
        "SELECT error FROM model_calls WHERE conversation_id = :c AND step >= 0"
        " ORDER BY started_at",
        c=conversation,
    )
    assert errors[0][0] is not None and errors[1][0] is None


def test_repeated_provider_call_ids_still_deliver_every_message(
    scripted: Any, database_url: str
) -> None:
    # Small local models number every reply's calls from zero: ids repeat across steps.
    server = scripted(
        [
            {"tool_calls": [{"id": "call_0", **_say("first")}]},
            {"tool_calls": [{"id": "call_0", **_say("second", final=True)}]},
        ]
    )
    _, messages = _run_turn(server, database_url)
    assert [m["body"] for m in messages] == ["go", "first", "second"]


def test_a_model_that_keeps_failing_ends_the_turn_with_one_message(
    tmp_path: Path, database_url: str
) -> None:
    with FakeProvider() as fake:
        fake.answers.append((400, {"error": {"message": "context too long"}}))
        server = ServerProcess(
            tmp_path / "data", database_url, model=f"openai-compatible:{fake.url}/v1#fake"
        ).start()
        try:
            conversation, messages = _run_turn(server, database_url)
        finally:
            server.stop()
    assert len(messages) == 2 and "model kept failing" in messages[1]["body"]
    assert rows(
        database_url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation
    ) == [("failed",)]


def test_a_reply_that_sends_a_receipt_back_is_asked_again_then_dropped(
    scripted: Any, database_url: str
) -> None:
    """What the local model did after writing a note: it sent the send's receipt ("Delivered to
    the user (message #2).") back to the owner, again and again, the number counting up. The
    copy is never sent: the model is asked once more, and a second copy ends the turn with
    nothing more said."""
    server = scripted(
        [
            {"tool_calls": [_say("Noted: milk on Friday.")]},
            {"tool_calls": [_say("Delivered to the user (message #2).")]},
            {"tool_calls": [_say("Delivered to the user (message #3).")]},
            {"tool_calls": [_say("Delivered to the user (message #4).")]},
        ]
    )
    conversation, messages = _run_turn(server, database_url, "Remember milk on Friday.")
    said = [m["body"] for m in messages if m["role"] == "agent"]
    assert said == ["Noted: milk on Friday."]
    steps = rows(
        database_url,
        "SELECT step FROM model_calls WHERE conversation_id = :c AND step >= 0 ORDER BY step",
        c=conversation,
    )
    assert [step for (step,) in steps] == [0, 1, 1]  # the copy and its retry: one step


def test_a_reply_that_parrots_an_earlier_message_is_asked_again_then_explained(
    scripted: Any, database_url: str
) -> None:
    """A model that answers a new question with its earlier reply, word for word (what the
    small local model did across conversations): the copy is never sent; the model is asked
    once more, and a second copy becomes a plain sentence on how to get a stronger model."""
    earlier = "I can help you with various tasks, such as reading files and setting timers."
    server = scripted([{"tool_calls": [_say(earlier, final=True)]}])
    _, first = _run_turn(server, database_url, "What can you do for me?")
    assert [m["body"] for m in first if m["role"] == "agent"] == [earlier]
    conversation, second = _run_turn(server, database_url, "Write a poem about owls.")
    said = [m["body"] for m in second if m["role"] == "agent"]
    assert len(said) == 1 and earlier not in said, said
    assert "could not answer" in said[0] and "NIGHTOWL_MODEL" in said[0]
    # Two recorded calls for the one step: the copy and the retry with its note.
    calls = rows(
        database_url,
        "SELECT step, error FROM model_calls WHERE conversation_id = :c AND step >= 0",
        c=conversation,
    )
    assert calls == [(0, None), (0, None)]
    # The same question again may get the same answer.
    _, again = _run_turn(server, database_url, "What can you do for me?")
    assert [m["body"] for m in again if m["role"] == "agent"] == [earlier]


def test_a_reply_that_sends_this_turns_answer_again_ends_the_turn_without_a_copy(
    scripted: Any, database_url: str
) -> None:
    """A model that answers without saying the answer is final is called again and sends the
    same answer a second time (what the small local model did): the owner gets it once, and
    the turn ends there, with no note about a weaker model."""
    poem = "Owls glide at dusk,\nsilent wings over the field,\nthe moon keeps their watch."
    server = scripted(
        [
            {"tool_calls": [_say(poem)]},
            {"tool_calls": [_say(poem)]},
            {"tool_calls": [_say("A third message nobody should see.", final=True)]},
        ]
    )
    conversation, messages = _run_turn(server, database_url, "Write a three-line poem about owls.")
    assert [m["body"] for m in messages if m["role"] == "agent"] == [poem]
    assert _model_calls(database_url, conversation) == 2
