"""The autonomy report's sums (pure): which calls went ahead without asking, which were held and
how they were answered, the median time to an answer, and spending by what woke the turn."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from nightowl.harness.report import ActionEvent, Spend, autonomy_report, source_of

DAY = date(2026, 12, 1)


def at(day: int, hour: int, seconds: float = 0) -> datetime:
    return datetime(2026, 12, day, hour, tzinfo=UTC) + timedelta(seconds=seconds)


def test_actions_are_counted_once_per_call_on_the_day_each_thing_happened() -> None:
    events = [
        # Reviewed and allowed: done without asking.
        ActionEvent("t1:0.0", "reviewed", at(1, 9)),
        # Reviewed, held, approved 30 s later.
        ActionEvent("t1:0.1", "reviewed", at(1, 10)),
        ActionEvent("t1:0.1", "approval_requested", at(1, 10)),
        ActionEvent("t1:0.1", "approved", at(1, 10, 30)),
        # Held by data flow without a review, denied 90 s later.
        ActionEvent("t2:1.0", "approval_requested", at(1, 11)),
        ActionEvent("t2:1.0", "denied", at(1, 11, 90)),
        # Held late on the 2nd, expired on the 3rd: no answer time.
        ActionEvent("t3:0.0", "reviewed", at(2, 23, 3590)),
        ActionEvent("t3:0.0", "approval_requested", at(2, 23, 3590)),
        ActionEvent("t3:0.0", "timed_out", at(3, 0, 10)),
        # The same event twice (a re-run step cannot log twice, but the sums must not care).
        ActionEvent("t4:0.0", "reviewed", at(3, 8)),
        ActionEvent("t4:0.0", "reviewed", at(3, 8)),
    ]
    report = autonomy_report(events, [], DAY, 3)
    days = {d["day"]: d for d in report["days"]}
    first = days["2026-12-01"]
    assert first["actions"] == {
        "without_asking": 1,
        "held": 2,
        "approved": 1,
        "denied": 1,
        "expired": 0,
    }
    assert first["median_answer_s"] == 60.0 and first["answers"] == 2
    assert days["2026-12-02"]["actions"]["held"] == 1
    assert days["2026-12-02"]["actions"]["expired"] == 0
    assert days["2026-12-03"]["actions"]["expired"] == 1
    assert days["2026-12-03"]["actions"]["without_asking"] == 1
    assert days["2026-12-03"]["median_answer_s"] is None
    total = report["total"]
    assert total["actions"] == {
        "without_asking": 2,
        "held": 3,
        "approved": 1,
        "denied": 1,
        "expired": 1,
    }
    assert total["median_answer_s"] == 60.0


def test_an_answer_to_a_question_from_before_the_report_counts_without_a_time() -> None:
    events = [ActionEvent("t1:0.0", "approved", at(1, 9))]
    report = autonomy_report(events, [], DAY, 1)
    day = report["days"][0]
    assert day["actions"]["approved"] == 1 and day["actions"]["held"] == 0
    assert day["median_answer_s"] is None and day["answers"] == 0


def test_what_happened_outside_the_days_is_left_out_and_quiet_days_are_listed() -> None:
    events = [ActionEvent("t0:0.0", "reviewed", at(1, 9) - timedelta(days=1))]
    spends = [Spend(at(4, 1), "direct", 500, 0.01)]
    report = autonomy_report(events, spends, DAY, 3)
    assert [d["day"] for d in report["days"]] == [
        "2026-12-01",
        "2026-12-02",
        "2026-12-03",
    ]
    assert report["total"]["tokens"] == 0
    assert report["total"]["actions"]["without_asking"] == 0


def test_spending_is_summed_by_source_and_unpriced_calls_are_counted_apart() -> None:
    spends = [
        Spend(at(1, 9), "direct", 1000, 0.002),
        Spend(at(1, 9, 5), "direct", 500, 0.001),
        Spend(at(1, 12), "routines", 300, None),
        Spend(at(2, 3), "background", 40, 0.0001),
        Spend(at(2, 4), "made-up", 7, None),
    ]
    report = autonomy_report([], spends, DAY, 2)
    first, second = report["days"]
    assert first["tokens"] == 1800 and first["cost_usd"] == 0.003
    assert first["by_source"]["direct"] == {"tokens": 1500, "cost_usd": 0.003, "unpriced_calls": 0}
    assert first["by_source"]["routines"] == {"tokens": 300, "cost_usd": 0.0, "unpriced_calls": 1}
    assert second["by_source"]["background"]["tokens"] == 40
    assert second["by_source"]["other"]["tokens"] == 7
    assert report["total"]["tokens"] == 1847
    assert set(first["by_source"]) == {
        "direct",
        "routines",
        "webhooks",
        "channels",
        "timers",
        "helpers",
        "background",
        "other",
    }


def test_a_call_counts_for_what_woke_its_turn() -> None:
    def source(**given: object) -> str:
        call = {
            "turn_id": "turn_1",
            "step": 0,
            "helper": False,
            "routine": False,
            "trigger": "api",
            "background_steps": frozenset({-2}),
        }
        call.update(given)
        return source_of(**call)  # type: ignore[arg-type]

    assert source() == "direct"
    assert source(trigger="webhook") == "webhooks"
    assert source(trigger="telegram") == "channels"
    assert source(trigger="email") == "channels"
    assert source(trigger="watch") == "routines"
    assert source(routine=True, trigger=None) == "routines"
    assert source(trigger="timer") == "timers"
    assert source(helper=True) == "helpers"
    assert source(trigger="helper") == "helpers"  # a parent's turn woken by a report
    assert source(turn_id="warm") == "background"
    assert source(turn_id="compaction:turn_9") == "background"
    assert source(step=-2) == "background"  # the memory pass, inside a turn's records
    assert source(step=-1) == "direct"  # the safety review is part of the turn
    assert source(trigger=None) == "other"
    assert source(trigger="carrier-pigeon") == "other"


def test_a_draft_is_held_until_the_owner_sends_or_discards_it() -> None:
    events = [
        # Reviewed, drafted, sent by the owner 2 minutes later.
        ActionEvent("t1:0.0", "reviewed", at(1, 9)),
        ActionEvent("t1:0.0", "sent", at(1, 9, 120)),
        # Discarded after 40 s.
        ActionEvent("t2:0.0", "reviewed", at(1, 10)),
        ActionEvent("t2:0.0", "discarded", at(1, 10, 40)),
        # Never answered.
        ActionEvent("t3:0.0", "reviewed", at(1, 11)),
        ActionEvent("t3:0.0", "timed_out", at(1, 12)),
        # Send pressed, the provider failed: the owner's answer was still yes.
        ActionEvent("t4:0.0", "reviewed", at(1, 13)),
        ActionEvent("t4:0.0", "send_failed", at(1, 13, 10)),
    ]
    day = autonomy_report(events, [], DAY, 1)["days"][0]
    assert day["actions"] == {
        "without_asking": 0,
        "held": 4,
        "approved": 2,
        "denied": 1,
        "expired": 1,
    }
    assert day["answers"] == 3 and day["median_answer_s"] == 40.0
