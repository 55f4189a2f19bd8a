"""A routine's watch judged without the model (pure): the first check records, an unchanged
thing skips, a change says what changed; a watch's fields are validated."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from nightowl.harness.watches import MAX_DIFF, UNCHANGED, Seen, Watch, judge

PAGE = Watch(kind="url", target="https://example.com/status")


def test_the_first_check_records_and_skips_then_unchanged_skips_and_a_change_runs() -> None:
    first = judge(PAGE, None, Seen(text="All systems go.\nLast check: 09:00"))
    assert not first.changed and first.what.startswith(f"{UNCHANGED}: first check")
    same = judge(PAGE, first.state, Seen(text="All systems go.\nLast check: 09:00"))
    assert not same.changed and same.what == UNCHANGED and same.state == first.state
    changed = judge(PAGE, same.state, Seen(text="Database degraded.\nLast check: 09:00"))
    assert changed.changed
    assert "-All systems go." in changed.what and "+Database degraded." in changed.what
    assert json.loads(changed.state)["text"].startswith("Database degraded.")


def test_a_long_diff_is_cut_and_says_how_much_more() -> None:
    before = judge(PAGE, None, Seen(text="\n".join(f"line {i}" for i in range(2_000))))
    after = judge(PAGE, before.state, Seen(text="\n".join(f"row {i}" for i in range(2_000))))
    assert after.changed and len(after.what) < MAX_DIFF + 100
    assert "more characters of the diff]" in after.what


def test_a_file_that_disappears_and_webhook_deliveries_are_changes() -> None:
    report = Watch(kind="file", target="reports/today.md")
    there = judge(report, None, Seen(text="# Today"))
    gone = judge(report, there.state, Seen(missing=True))
    assert gone.changed
    assert gone.what == "the file reports/today.md in your computer no longer exists"
    hook = Watch(kind="webhook", target="hook_1")
    seen = judge(hook, None, Seen(text="hook_1:d1", count=1))
    assert judge(hook, seen.state, Seen(text="hook_1:d1", count=1)).what == UNCHANGED
    # Old deliveries cleaned away (the count fell) with no new one: unchanged.
    assert not judge(hook, seen.state, Seen(text="hook_1:d1", count=0)).changed
    three = judge(hook, seen.state, Seen(text="hook_1:d4", count=4))
    assert three.changed and three.what == "3 new delivery(ies) since the last check"


def test_a_damaged_memory_of_the_last_check_counts_as_a_change_not_a_crash() -> None:
    verdict = judge(PAGE, "not json", Seen(text="hello"))
    assert verdict.changed and "+hello" in verdict.what


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"kind": "url", "target": "file:///etc/passwd"}, "http(s) URL with a host"),
        ({"kind": "url", "target": "https://"}, "http(s) URL with a host"),
        ({"kind": "file", "target": "/etc/passwd"}, "inside the computer's home"),
        ({"kind": "file", "target": "notes/../../other/secret"}, "inside the computer's home"),
        ({"kind": "sms", "target": "INBOX"}, "'url', 'file', 'webhook', 'imap' or 'resource'"),
        ({"kind": "url", "target": " https://example.com"}, "one line without surrounding"),
        ({"kind": "url", "target": "https://example.com", "every": 5}, "Extra inputs"),
        ({"kind": "url", "target": ""}, "at least 1 character"),
    ],
)
def test_a_watch_is_validated_with_what_to_write(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError) as error:
        Watch.model_validate(fields)
    assert says in str(error.value)
