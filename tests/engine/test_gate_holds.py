"""The gate's holds as DBOS replays a recorded step: typed, or as an earlier version's dict."""

from __future__ import annotations

from nightowl.engine.gate import recorded_hold
from nightowl.messages import Hold


def test_a_hold_recorded_as_a_dict_replays_as_a_hold() -> None:
    old = {"question": "msg_1", "reason": "sends outside text", "keep_result": True}
    assert recorded_hold(old) == Hold("msg_1", "sends outside text", keep_result=True)
    assert recorded_hold({"question": "msg_2", "reason": "r"}) == Hold("msg_2", "r")


def test_a_typed_hold_and_no_hold_replay_as_they_were() -> None:
    hold = Hold("msg_3", "a payment")
    assert recorded_hold(hold) is hold
    assert recorded_hold(None) is None
    assert Hold.from_dict(hold.to_dict()) == hold
