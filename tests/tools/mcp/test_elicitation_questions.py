"""How a server's elicitation becomes the owner's question, and the answer the server gets."""

from __future__ import annotations

import json

import mcp_types as types

from nightowl.tools.mcp.server_requests import elicit_result, question_for


def _form(
    properties: dict[str, object], required: list[str] | None = None
) -> types.ElicitRequestFormParams:
    schema = {"type": "object", "properties": properties, "required": required or []}
    return types.ElicitRequestFormParams(message="Which one?", requested_schema=schema)


def test_a_single_choice_is_asked_with_buttons_and_the_server_gets_the_value() -> None:
    params = _form(
        {"size": {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]}}
    )
    body, controls = question_for("shop", params)
    assert body == "**The connector shop asks:** Which one?"
    assert controls["buttons"] == [
        {"value": "choose:s", "label": "Small"},
        {"value": "choose:m", "label": "Medium"},
        {"value": "decline", "label": "Decline"},
    ]
    assert elicit_result(params, {"value": "choose:m"}).content == {"size": "m"}
    assert elicit_result(params, {"value": "decline"}).action == "decline"
    assert elicit_result(params, None).action == "cancel"  # no answer in time


def test_a_yes_no_question_answers_a_boolean() -> None:
    params = _form({"agree": {"type": "boolean", "description": "Agree?"}})
    _, controls = question_for("shop", params)
    assert [b["label"] for b in controls["buttons"]] == ["Yes", "No", "Decline"]
    assert elicit_result(params, {"value": "choose:false"}).content == {"agree": False}


def test_a_form_is_an_editable_draft_of_its_fields() -> None:
    params = _form(
        {
            "name": {"type": "string", "description": "Your name"},
            "n": {"type": "integer", "default": 2},
        },
        required=["name"],
    )
    body, controls = question_for("crm", params)
    assert "- name: Your name (required)" in body and "- n: integer" in body
    assert json.loads(controls["draft"]) == {"name": None, "n": 2}
    sent = elicit_result(params, {"action": "send", "text": '{"name": "Ada", "n": null}'})
    assert (sent.action, sent.content) == ("accept", {"name": "Ada"})  # empty fields left out
    assert elicit_result(params, {"action": "discard"}).action == "decline"
    assert elicit_result(params, {"action": "send", "text": "not json"}).action == "cancel"


def test_a_url_elicitation_asks_the_owner_to_open_it() -> None:
    params = types.ElicitRequestURLParams(
        message="Sign in", url="https://example.com/x", elicitation_id="e1"
    )
    body, controls = question_for("crm", params)
    assert "Open https://example.com/x" in body
    assert controls["buttons"][0] == {"value": "accept", "label": "Done"}
    assert elicit_result(params, {"value": "accept"}).action == "accept"
