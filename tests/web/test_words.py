"""Schedules in words and next slots (no server, no browser)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from procsched._web._words import describe, next_slots

NS = 1_000_000_000


@pytest.mark.parametrize(("schedule", "words", "zone"), [
    ({"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Berlin"}, "at 03:00 Europe/Berlin, every day", "Europe/Berlin"),
    ({"kind": "cron", "expr": "30 2 * * 1-5", "tz": "America/New_York"},
     "at 02:30 America/New_York, Monday through Friday", "America/New_York"),
    ({"kind": "cron", "expr": "@daily", "tz": "UTC"}, "at 00:00 UTC, every day", "UTC"),
    ({"kind": "cron", "expr": "*/5 * * * *", "tz": 3600.0}, "every 5 minutes (UTC+01:00)", "UTC+01:00"),
    ({"kind": "cron", "expr": "*/10 * * * * *", "tz": "UTC"}, "every 10 seconds (UTC)", "UTC"),
    ({"kind": "fixed_rate", "period_ns": NS // 2}, "every 500 ms", None),
    ({"kind": "fixed_rate", "period_ns": 60 * NS}, "every 1 min", None),
    ({"kind": "fixed_delay", "period_ns": 5 * NS}, "every 5 s after each run ends", None),
    ({"kind": "once"}, "once", None),
    (None, "-", None),
])  # fmt: skip
def test_schedule_in_words(schedule, words, zone):
    assert describe(schedule) == (words, zone)


def test_next_slots_follow_the_calendar_across_dst():
    first = datetime(2026, 3, 28, 2, 0, tzinfo=timezone.utc)  # 03:00 CET
    slots = next_slots({"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Berlin"}, first, 3)
    assert [s.hour for s in slots] == [2, 1, 1]  # 03:00 CEST is 01:00 UTC after the change
    rate = next_slots({"kind": "fixed_rate", "period_ns": NS // 2}, first)
    assert len(rate) == 10 and (rate[9] - rate[0]).total_seconds() == 4.5
    assert next_slots({"kind": "fixed_delay", "period_ns": NS}, first) == [first]
    assert next_slots({"kind": "fixed_rate", "period_ns": NS}, None) == []
