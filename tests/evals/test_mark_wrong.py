"""A reply the owner marks wrong becomes a draft case that replays on a model: one that
repeats the mistake fails it, one that does the right thing passes; secrets in what the case
keeps are stored only as their redaction. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from nightowl.evals.capture import Flag, flag_failure, mark_wrong, says_misunderstood
from nightowl.evals.cases import Checker, EvalCase
from nightowl.evals.runner import run_cases
from nightowl.messages import Entry
from nightowl.models.pricing import PriceTable
from nightowl.safety.vault import set_secret
from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database
from nightowl.store.errors import Invalid
from nightowl.store.evals import get_case, list_cases, update_case
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import get_message
from nightowl.store.transcript import put_entry
from nightowl.store.turns import claim_batch, queue_turn
from nightowl.store.users import ensure_owner
from tests.evals.scripts import say, scripted_for

SECRET = "tok-9f8e7d6c5b4a"
WRONG = "Your balance is 40 EUR."


def _failed_turn(database: Database, key: bytes) -> tuple[str, str, str]:
    """A turn that read an account (its output carrying a secret) and answered wrongly."""
    with database.write() as session:
        owner = ensure_owner(session)
        set_secret(session, key, owner.id, "bank_token", SECRET)
        conversation = create_conversation(session, owner.id, title="Money")
        append_message(
            session, conversation.id, role="user", body="What's my balance?", trust="owner"
        )
        turn, _ = queue_turn(session, conversation.id, 0)
        claim_batch(session, turn.id)
        entries = [
            {"kind": "user", "text": "What's my balance?", "trust": "owner"},
            {
                "kind": "assistant",
                "tool_calls": [
                    {"id": "c1", "name": "shell", "arguments": {"command": "bank balance"}}
                ],
            },
            {
                "kind": "tool_result",
                "call_id": "c1",
                "tool_name": "shell",
                "text": f"GET /balance Authorization: Bearer {SECRET}\nbalance: 1,240.00 EUR",
                "trust": "untrusted",
            },
            {
                "kind": "assistant",
                "tool_calls": [{"id": "c2", "name": "send_to_user", "arguments": {"text": WRONG}}],
            },
        ]
        for n, entry in enumerate(entries):
            put_entry(session, conversation.id, turn.id, f"{turn.id}:e{n}", Entry.from_dict(entry))
        message = deliver_to_user(
            session, conversation.id, key=f"{turn.id}:send", body=WRONG, turn_id=turn.id
        )
    return owner.id, conversation.id, message.id


def test_a_reply_marked_wrong_replays_and_keeps_no_secret(
    database: Database, tmp_path: Path
) -> None:
    key = Fernet.generate_key()
    owner_id, conversation_id, message_id = _failed_turn(database, key)
    with database.write() as session:
        made = mark_wrong(
            session,
            owner_id=owner_id,
            conversation_id=conversation_id,
            message_id=message_id,
            expected="Read the balance from the output: 1,240.00 EUR",
            vault_key=key,
        )
        again = mark_wrong(
            session,
            owner_id=owner_id,
            conversation_id=conversation_id,
            message_id=message_id,
            expected="the same again",
            vault_key=key,
        )
    assert again.id == made.id and made.status == "draft"
    stored = json.dumps(made.case_data())
    assert SECRET not in stored
    assert "[secret:bank_token]" in stored
    case = EvalCase.from_dict(made.case_data())
    # Cut before the failing turn's first model call; its tool output recorded, trust kept.
    assert [e.kind for e in case.history] == ["user"]
    assert case.tool_results[0].tool == "shell" and case.tool_results[0].trust == "untrusted"
    assert case.failed_reply == WRONG

    # The owner sharpens the checker: the balance must be said.
    with database.write() as session:
        checker = Checker.from_dict({**made.checker, "require_text": [r"1,240"]})
        update_case(session, made.id, owner_id, checker=checker.to_dict(), status="kept")
        case = EvalCase.from_dict(get_case(session, made.id, owner_id).case_data())
        assert [c.id for c in list_cases(session, owner_id, status="kept")] == [made.id]

    read_then = {"tool_calls": [{"name": "shell", "arguments": {"command": "bank balance"}}]}
    mistaken = scripted_for(case, [read_then, say(WRONG)], tmp_path)
    right = scripted_for(case, [read_then, say("Your balance is 1,240.00 EUR.")], tmp_path)
    prices = PriceTable()
    first = asyncio.run(run_cases(database, [case], mistaken, prices=prices))
    assert first.to_dict()["passed"] == 0
    replay = first.replays[0]
    assert [c.name for c in replay.attempt.calls] == ["shell", "send_to_user"]
    failed = {c.check: c.passed for c in replay.verdict.checks}
    assert failed[r"require text /1,240/"] is False
    # The recorded output stood in for the shell: the model saw the redaction, not the secret.
    good = asyncio.run(run_cases(database, [case], right, prices=prices))
    assert good.to_dict()["passed"] == 1 and good.replays[0].tokens > 0
    # Another run of the first model, now doing it right: compared with its last run.
    mistaken.name = right.name = "scripted:same"
    asyncio.run(run_cases(database, [case], mistaken, prices=prices))
    fixed = asyncio.run(run_cases(database, [case], right, prices=prices))
    assert fixed.fixed == [case.id] and fixed.regressed == []
    worse = asyncio.run(run_cases(database, [case], mistaken, prices=prices))
    assert worse.regressed == [case.id]


def test_only_agent_messages_with_words_can_be_marked(database: Database) -> None:
    key = Fernet.generate_key()
    owner_id, conversation_id, message_id = _failed_turn(database, key)
    with database.write() as session:
        with pytest.raises(Invalid, match="should have happened"):
            mark_wrong(
                session,
                owner_id=owner_id,
                conversation_id=conversation_id,
                message_id=message_id,
                expected="  ",
                vault_key=key,
            )
        owners = append_message(session, conversation_id, role="user", body="x", trust="owner")
        with pytest.raises(Invalid, match="agent sent"):
            mark_wrong(
                session,
                owner_id=owner_id,
                conversation_id=conversation_id,
                message_id=owners.id,
                expected="y",
                vault_key=key,
            )


@pytest.mark.parametrize(
    ("text", "misunderstood"),
    [
        ("No, the other file", True),
        ("actually I meant Friday", True),
        ("That's not what I asked", True),
        ("that\u2019s not it", True),
        ("Wrong document.", True),
        ("also check the dates", False),
        ("Nothing else, thanks", False),
        ("know what, add Lee", False),
    ],
)
def test_the_misunderstood_rule(text: str, misunderstood: bool) -> None:
    assert says_misunderstood(text) is misunderstood


def test_a_flag_that_cannot_be_kept_never_fails_the_write_it_rides_on(
    database: Database,
) -> None:
    key = Fernet.generate_key()
    owner_id, conversation_id, message_id = _failed_turn(database, key)
    with database.read() as session:
        turn_id = get_message(session, conversation_id, message_id).turn_id
    assert turn_id
    flag = Flag("guard_stop", conversation_id, turn_id, "stopped after 40 steps", turn_id)
    with database.write() as session:
        kept = append_message(session, conversation_id, role="user", body="go on", trust="owner")
        # A vault key that does not open the stored secret: the case cannot be redacted.
        assert flag_failure(session, flag, Fernet.generate_key()) is None
    with database.write() as session:
        assert get_message(session, conversation_id, kept.id).body == "go on"
        assert list_cases(session, owner_id) == []
        made = flag_failure(session, flag, key)
        assert made is not None and flag_failure(session, flag, key) == made
        assert SECRET not in json.dumps(made.case_data())
