"""The parrot guard's decision (pure): a word-for-word repeat of an earlier message, while the
owner asked something new, is caught; the same question again, or a short reply, is not."""

from __future__ import annotations

from nightowl.harness.parrot import (
    could_not,
    echoed_receipt,
    newest_ask,
    repeated,
    resent,
    sent_since_asked,
    told,
    without_sends,
)
from nightowl.messages import Entry, ModelReply, ToolCall, Usage

EARLIER = "I can help you with various tasks, such as reading files and setting timers."


def _reply(*texts: str) -> ModelReply:
    calls = tuple(
        ToolCall(id=f"c{n}", name="send_to_user", arguments={"text": text, "final": True})
        for n, text in enumerate(texts)
    )
    return ModelReply(text="", tool_calls=calls, usage=Usage(), model="m")


def test_a_copy_of_an_earlier_message_is_caught_whatever_its_spacing_and_case() -> None:
    copy = _reply("i can help you with various tasks,  such as reading files and\nsetting timers.")
    found = repeated(copy, "Write a poem about owls.", [EARLIER], ["What can you do?"])
    assert found == EARLIER


def test_a_new_answer_passes() -> None:
    answer = _reply(
        "Owls glide at night,\nsilent wings in pale moonlight,\nthe forest holds still."
    )
    assert repeated(answer, "Write a poem about owls.", [EARLIER], ["What can you do?"]) is None


def test_the_same_question_again_may_get_the_same_answer() -> None:
    asked = ["What can you do?", "What can you do?"]  # the newest among them
    assert repeated(_reply(EARLIER), "what can you do?", [EARLIER], asked) is None


def test_short_replies_repeat_freely() -> None:
    assert repeated(_reply("Done, noted."), "remember milk", ["Done, noted."], []) is None


def test_any_of_several_sends_is_checked_and_other_tools_are_not() -> None:
    reply = _reply("A fresh first line that is long enough.", EARLIER)
    assert repeated(reply, "new question", [EARLIER], ["old question"]) == EARLIER
    shell = ModelReply(
        text="",
        tool_calls=(ToolCall(id="s", name="shell", arguments={"text": EARLIER}),),
        usage=Usage(),
        model="m",
    )
    assert told(shell) == [] and repeated(shell, "new", [EARLIER], []) is None


def test_the_newest_ask_is_the_last_message_from_a_person() -> None:
    history = [
        Entry(kind="user", text="first", trust="owner"),
        Entry(kind="assistant", text="", tool_calls=()),
        Entry(kind="user", text="second", trust="owner"),
        Entry(kind="notice", text="Current time", trust="agent"),
    ]
    assert newest_ask(history) == "second" and newest_ask([]) == ""


def test_the_owner_is_told_plainly_how_to_get_a_stronger_model() -> None:
    replaced = could_not(_reply(EARLIER), "local:qwen")
    [call] = replaced.tool_calls
    assert call.name == "send_to_user" and call.arguments["final"] is True
    assert "local:qwen" in call.arguments["text"] and "NIGHTOWL_MODEL" in call.arguments["text"]
    assert replaced.usage == Usage()


def test_a_sends_receipt_copied_back_is_caught_whatever_its_number() -> None:
    history = [
        Entry(kind="user", text="Remember milk on Friday."),
        Entry(
            kind="tool_result", text="Delivered to the user (message #2).", tool_name="send_to_user"
        ),
    ]
    assert echoed_receipt(_reply("Delivered to the user (message #17)."), history) is not None
    assert echoed_receipt(_reply("Noted: milk on Friday, and bread too."), history) is None
    # Another tool's result with the same words is not a send's receipt.
    other = [Entry(kind="tool_result", text="Delivered to the user (message #2).", tool_name="x")]
    assert echoed_receipt(_reply("Delivered to the user (message #17)."), other) is None


def test_without_sends_keeps_the_other_calls() -> None:
    note = ToolCall(id="n", name="write_note", arguments={"text": "milk"})
    reply = _reply("Delivered to the user (message #3).")
    both = ModelReply(text="", tool_calls=(*reply.tool_calls, note), usage=Usage(), model="m")
    assert without_sends(both).tool_calls == (note,)
    assert without_sends(reply).tool_calls == ()


def test_a_send_repeating_this_turns_message_is_caught_and_earlier_turns_are_not() -> None:
    """Only what was sent since the owner's newest message counts (an answer from an earlier
    turn is the other guard's business)."""
    sent = Entry(kind="assistant", tool_calls=_reply(EARLIER).tool_calls)
    history = [Entry(kind="user", text="What can you do?"), sent]
    assert sent_since_asked(history) == [EARLIER]
    spaced = " i can help you with various tasks, such as reading files and  setting timers."
    assert resent(_reply(spaced), history)
    assert not resent(_reply("Something new entirely, and long enough to count."), history)
    later = [*history, Entry(kind="user", text="And what else?")]
    assert sent_since_asked(later) == []
    assert not resent(_reply(EARLIER), later)
