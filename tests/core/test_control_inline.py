"""Schedule control through InlineScheduler (manual clock): the public API."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import procsched


def test_bad_control_arguments_are_refused_naming_them(sched: procsched.InlineScheduler) -> None:
    for kwargs, error, text in (
        ({"max_concurrent": 0}, ValueError, "max_concurrent"),
        ({"max_concurrent": 1.5}, TypeError, "max_concurrent"),
        ({"overlap": "bogus"}, ValueError, "overlap"),
        ({"misfire_grace": math.nan}, ValueError, "misfire_grace"),
        ({"misfire_grace": -1}, ValueError, "misfire_grace"),
    ):
        with pytest.raises(error, match=text):
            sched.schedule_at_fixed_rate(print, 1, **kwargs)
    assert sched.pending() == 0


def test_run_now_is_a_manual_run_and_the_schedule_stays(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: procsched.current_run().cause, 10, initial_delay=10)
    clock.advance(1)
    assert handle.run_now()
    assert sched.run_due() == 1
    assert [(r.cause, r.run, r.scheduled_for) for r in handle.runs] == [("manual", 1, 1.0)]
    assert handle.next_run == 10.0
    sched.run_until(10)
    assert [r.cause for r in handle.runs] == ["manual", "schedule"]
    assert sched.run_now(handle.id)
    assert not sched.run_now(12345)


def test_backfill_dry_run_and_run(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: None, 60, initial_delay=60)
    now = datetime.now(UTC)
    clock.advance(0)
    start = now - timedelta(minutes=5)
    slots = handle.backfill(start, now, dry_run=True)
    assert len(slots) == 5 and slots == sorted(slots) and all(start <= s < now for s in slots)
    assert sched.run_due() == 0
    assert handle.backfill(start, now) == slots
    assert sched.run_due() == 5
    assert [r.cause for r in handle.runs] == ["backfill"] * 5
    assert [r.scheduled_at for r in handle.runs] == slots
    with pytest.raises(ValueError, match="naive"):
        handle.backfill(start.replace(tzinfo=None), now)
    with pytest.raises(ValueError, match="before end"):
        handle.backfill(now, start)
    once = sched.schedule(lambda: None, 100)
    with pytest.raises(ValueError, match="once"):
        once.backfill(start, now)


def test_skipped_slots_are_listed_and_sent_to_listeners(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    events: list[dict[str, Any]] = []
    sched.add_listener(events.append, events=["run_skipped"])

    def slow() -> None:
        if procsched.current_run().run == 1:
            clock.advance(1.0)

    handle = sched.schedule_at_fixed_rate(slow, 0.4, misfire="skip")
    sched.run_until(1.5)
    slots = handle.slots()
    assert [(s.outcome, s.reason) for s in slots] == [
        ("ok", None),
        ("skipped", "misfire"),
        ("skipped", "misfire"),
        ("ok", None),
    ]
    assert [s.run for s in slots] == [1, None, None, 2]
    assert [round(e["scheduled_for"], 1) for e in events] == [0.4, 0.8]
    assert all(e["reason"] == "misfire" for e in events)
    assert [r.outcome for r in handle.runs] == ["ok", "ok"]
    assert handle.slots(limit=1) == slots[-1:]


def test_misfire_grace_one_shot_is_cancelled(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    handle = sched.schedule(lambda: None, 1, misfire_grace=0.5)
    clock.advance(2)
    sched.run_due()
    assert handle.cancelled()
    assert [(s.outcome, s.reason) for s in handle.slots()] == [("skipped", "late")]
