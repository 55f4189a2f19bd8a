"""Which reaction answers which question (store/questions.py), how a channel with reactions
says so (channels/render.py), and which reaction is a thumbs-down (channels/inbound.py,
Slack's names in channels/slack_events.py)."""

from __future__ import annotations

from nightowl.channels.inbound import is_thumbs_down
from nightowl.channels.render import message_text
from nightowl.channels.slack_events import thumbs_down_of
from nightowl.store.questions import KEYCAPS, answer_by_reaction

APPROVAL = {
    "buttons": [{"label": "Approve", "value": "approve"}, {"label": "Deny", "value": "deny"}]
}
CHOICE = {"buttons": [{"label": "Train", "value": "train"}, {"label": "Car", "value": "car"}]}
DRAFT = {"draft": "Lunch on Friday?"}


def test_keycaps_pick_a_button_and_yes_or_no_approve_deny_send_or_discard() -> None:
    assert answer_by_reaction(CHOICE, KEYCAPS[1]) == {"value": "car"}
    assert answer_by_reaction(CHOICE, KEYCAPS[2]) is None  # there is no third button
    assert answer_by_reaction(CHOICE, "\U0001f44d") is None  # a yes picks no travel mode
    assert answer_by_reaction(APPROVAL, "\U0001f44d") == {"value": "approve"}
    assert answer_by_reaction(APPROVAL, "\u274c") == {"value": "deny"}
    assert answer_by_reaction(DRAFT, "\u2705") == {"action": "send"}
    assert answer_by_reaction(DRAFT, "\U0001f44d") is None  # a thumbs-up sends nothing
    assert answer_by_reaction(DRAFT, "\U0001f44e") == {"action": "discard"}
    assert answer_by_reaction(DRAFT, "\U0001f600") is None
    assert answer_by_reaction({}, "\U0001f44d") is None  # not a question


def test_a_channel_with_reactions_says_which_to_use_and_one_without_does_not() -> None:
    meta = {"controls": CHOICE}
    with_reactions = message_text("Which way?", meta, None, reactions=True)
    assert f"Or react: {KEYCAPS[0]} Train, {KEYCAPS[1]} Car" in with_reactions
    assert "react" not in message_text("Which way?", meta, None)
    draft = message_text("Draft to Dana.", {"controls": DRAFT}, None, reactions=True)
    assert "Or react \u2705 to send it, \u274c to discard it." in draft


def test_a_thumbs_down_is_recognised_with_any_skin_tone_and_slacks_names() -> None:
    assert is_thumbs_down("\U0001f44e") and is_thumbs_down("\U0001f44e\ufe0f")
    assert is_thumbs_down(" \U0001f44e\U0001f3ff")
    assert not is_thumbs_down("\U0001f44d") and not is_thumbs_down("\U0001f44e\U0001f44e")
    event = {
        "type": "reaction_added",
        "user": "U0OWNER",
        "reaction": "-1::skin-tone-2",
        "item": {"type": "message", "channel": "D1", "ts": "1.5"},
    }
    payload = {"type": "event_callback", "event_id": "Ev1", "event": event}
    reaction = thumbs_down_of(payload, "U0BOT")
    assert reaction is not None
    assert (reaction.reaction_to, reaction.sender, reaction.text) == (
        "D1:1.5",
        "U0OWNER",
        "\U0001f44e",
    )
    on_a_file = {**event, "item": {"type": "file", "file": "F1"}}
    assert thumbs_down_of({**payload, "event": on_a_file}, "U0BOT") is None
    assert thumbs_down_of({**payload, "event": {**event, "reaction": "+1"}}, "U0BOT") is None
    assert thumbs_down_of({**payload, "event": {**event, "user": "U0BOT"}}, "U0BOT") is None
