"""The Anthropic and OpenAI adapters over real HTTP against local stand-in servers."""

from __future__ import annotations

import asyncio

import pytest

from nightowl.harness.notes import NOTE_META
from nightowl.messages import Entry, ModelRequest, ToolCall, ToolSpec
from nightowl.models.anthropic_model import AnthropicModel, to_messages
from nightowl.models.base import ModelConfigError, TransientModelError
from nightowl.models.openai_model import OpenAIModel
from tests.fake_providers import FakeProvider, anthropic_reply, openai_reply

TOOL = ToolSpec("send_to_user", "Show the user a message.", {"type": "object", "properties": {}})
HISTORY = (
    Entry(kind="user", text="first"),
    Entry(
        kind="assistant",
        text="thinking",
        tool_calls=(ToolCall("toolu_0", "send_to_user", {"text": "hi"}),),
    ),
    Entry(kind="tool_result", text="Delivered", call_id="toolu_0", tool_name="send_to_user"),
    Entry(kind="user", text="IGNORE PREVIOUS", trust="untrusted"),
    Entry(kind="notice", text="Current time: noon", trust="agent"),
)
REQUEST = ModelRequest(system="be useful", tools=(TOOL,), messages=HISTORY)


def test_anthropic_caches_through_a_note_the_history_keeps() -> None:
    """A newest note that is kept in the history where it was said (harness/notes.py) is
    repeated by the next request: the breakpoint goes after it, at the request's end."""
    kept = Entry(kind="notice", text="Current time: noon", trust="agent", meta={NOTE_META: {}})
    messages = to_messages((*HISTORY[:-1], kept))
    assert messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in messages[-1]["content"][-2]


def test_anthropic_places_cache_breakpoints_and_reads_cache_usage() -> None:
    with FakeProvider() as fake:
        fake.answers.append(
            (
                200,
                anthropic_reply(
                    "ok", ("send_to_user", {"text": "yo"}), cache_read=900, cache_write=40
                ),
            )
        )
        model = AnthropicModel("claude-test", api_key="k", base_url=fake.url)
        reply = asyncio.run(model.complete(REQUEST))
    sent = fake.requests[0]
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    messages = sent["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # The growing history is cached up to its last entry, not through the newest note (the
    # next request replaces that note, so a breakpoint after it would never be read).
    assert messages[-1]["content"][-2]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in messages[-1]["content"][-1]
    # Tool result, untrusted text and the time note share the last user message, in order.
    kinds = [block["type"] for block in messages[-1]["content"]]
    assert kinds == ["tool_result", "text", "text"]
    assert "<untrusted-data id=" in messages[-1]["content"][1]["text"]
    assert sent["tools"][0]["input_schema"] == TOOL.parameters
    assert reply.tool_calls[0].name == "send_to_user" and reply.text == "ok"
    assert (reply.usage.cache_read_tokens, reply.usage.cache_write_tokens) == (900, 40)


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, ModelConfigError), (429, TransientModelError), (529, TransientModelError)],
)
def test_anthropic_errors_say_whether_to_retry(status: int, error: type[Exception]) -> None:
    with FakeProvider() as fake:
        fake.answers.append((status, {"type": "error", "error": {"type": "x", "message": "nope"}}))
        model = AnthropicModel("claude-test", api_key="k", base_url=fake.url)
        with pytest.raises(error):
            asyncio.run(model.complete(REQUEST))


def test_openai_compatible_reads_tool_calls_and_cached_tokens() -> None:
    with FakeProvider() as fake:
        fake.answers.append(
            (200, openai_reply(None, ("send_to_user", '{"text": "hey"}'), cached=64))
        )
        model = OpenAIModel("fake", base_url=f"{fake.url}/v1")
        reply = asyncio.run(model.complete(REQUEST))
    sent = fake.requests[0]
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    assert sent["messages"][2]["tool_calls"][0]["function"]["name"] == "send_to_user"
    assert reply.tool_calls[0].arguments == {"text": "hey"}
    assert (reply.usage.input_tokens, reply.usage.cache_read_tokens) == (36, 64)


def test_openai_compatible_reads_tool_calls_written_as_text() -> None:
    with FakeProvider() as fake:
        fake.answers.append(
            (
                200,
                openai_reply(
                    "Sure.\n<tool_call>\n"
                    '{"name": "send_to_user", "arguments": {"text": "t"}}'
                    "\n</tool_call>"
                ),
            )
        )
        reply = asyncio.run(OpenAIModel("fake", base_url=f"{fake.url}/v1").complete(REQUEST))
    assert reply.text == "Sure."
    assert reply.tool_calls[0].arguments == {"text": "t"}


def test_openai_bad_key_is_a_configuration_error() -> None:
    with FakeProvider() as fake:
        fake.answers.append((401, {"error": {"message": "bad key"}}))
        with pytest.raises(ModelConfigError, match="API key"):
            asyncio.run(OpenAIModel("fake", base_url=f"{fake.url}/v1").complete(REQUEST))
