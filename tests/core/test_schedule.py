"""Schedule: the one value that answers every question about a task's slots.

Its answers, kind by kind and misfire policy by policy, against the
arithmetic DESIGN.md gives (the reference experiment: a 400 ms grid whose
first run, at 200 ms, takes 1 s); its wire form and its stored record.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from procsched import _tz
from procsched._core import ONCE, CronTrigger, Kind, Misfire, Schedule
from procsched._core._schedule import MISSED_CAP
from procsched._core._units import NS, wall_ns

MS = 1_000_000
PARIS = ZoneInfo("Europe/Paris")


def at(*args: int, tz: object = PARIS) -> int:
    return wall_ns(datetime(*args, tzinfo=tz))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("misfire", "ended", "expected"),
    [
        # a run of the slot at 200 ms ended at 1200 ms: the slots 600 and 1000 were missed
        (Misfire.CATCH_UP, 1200 * MS, (600 * MS, 0)),  # made up back to back, from the first missed
        (Misfire.SKIP, 1200 * MS, (1400 * MS, 2)),  # the first grid point at or after now
        (Misfire.COALESCE, 1200 * MS, (1000 * MS, 1)),  # the last grid point at or before now, once
        (Misfire.SKIP, 500 * MS, (600 * MS, 0)),  # not late: the next grid point
        (Misfire.COALESCE, 1400 * MS, (1400 * MS, 2)),  # a grid point now: it is the one that runs
    ],
)
def test_fixed_rate_after_a_run(misfire: Misfire, ended: int, expected: tuple[int, int]) -> None:
    assert Schedule.fixed_rate(400 * MS, misfire).after_run(200 * MS, ended, "ok") == expected


def test_a_crashed_or_timed_out_run_is_not_caught_up_back_to_back() -> None:
    rate = Schedule.fixed_rate(400 * MS, Misfire.CATCH_UP)
    assert rate.after_run(200 * MS, 1200 * MS, "crashed") == (1400 * MS, 2)
    assert rate.after_run(200 * MS, 1200 * MS, "timeout") == (1400 * MS, 2)
    assert rate.after_run(200 * MS, 1200 * MS, "error") == (600 * MS, 0)


def test_fixed_delay_counts_from_the_end_and_one_shot_has_no_next() -> None:
    assert Schedule.fixed_delay(400 * MS).after_run(200 * MS, 1200 * MS, "ok") == (1600 * MS, 0)
    assert Schedule.fixed_delay(400 * MS).next_after(200 * MS) == 600 * MS  # (its run's end unknown: a period)
    assert ONCE.after_run(200 * MS, 1200 * MS, "ok") == (None, 0)
    assert ONCE.next_after(0) is None and Schedule.once() is ONCE and not ONCE.periodic


def test_calendar_after_a_run_by_misfire() -> None:
    trigger = CronTrigger("0 * * * *", PARIS)  # hourly
    slot = at(2026, 1, 10, 3)
    ended = at(2026, 1, 10, 6, 30)  # 04:00, 05:00 and 06:00 missed
    assert Schedule.calendar(trigger, Misfire.CATCH_UP).after_run(slot, ended, "ok") == (at(2026, 1, 10, 4), 0)
    assert Schedule.calendar(trigger, Misfire.COALESCE).after_run(slot, ended, "ok") == (at(2026, 1, 10, 6), 2)
    assert Schedule.calendar(trigger, Misfire.SKIP).after_run(slot, ended, "ok") == (at(2026, 1, 10, 7), 3)
    assert Schedule.calendar(trigger).after_run(slot, at(2026, 1, 10, 3, 5), "ok") == (at(2026, 1, 10, 4), 0)


def test_counting_missed_calendar_slots_stops_at_the_cap() -> None:
    every_second = Schedule.calendar(CronTrigger("* * * * * *", UTC))
    slot = at(2026, 1, 1, tz=UTC)
    ended = slot + 3 * 86_400 * NS  # a suspended machine: 259,200 slots missed
    following, missed = every_second.after_run(slot, ended, "ok")
    assert following == ended and missed == MISSED_CAP - 1


def test_resume_a_slot_left_behind() -> None:
    rate = Schedule.fixed_rate(10 * NS, Misfire.SKIP)
    assert rate.resume(100 * NS, 125 * NS) == 130 * NS
    assert rate._replace(misfire=Misfire.COALESCE).resume(100 * NS, 125 * NS) == 120 * NS
    assert rate._replace(misfire=Misfire.CATCH_UP).resume(100 * NS, 125 * NS) == 100 * NS
    assert rate.resume(130 * NS, 125 * NS) == 130 * NS  # not left behind
    daily = Schedule.calendar(CronTrigger("0 3 * * *", PARIS), Misfire.COALESCE)
    down_since = at(2026, 1, 10, 3)
    assert daily.resume(down_since, at(2026, 1, 13, 12)) == at(2026, 1, 13, 3)  # the last slot, once
    assert daily._replace(misfire=Misfire.SKIP).resume(down_since, at(2026, 1, 13, 12)) == at(2026, 1, 14, 3)
    assert Schedule.fixed_delay(NS).resume(5, 10) == 5  # no grid: it runs as soon as it can


def test_not_before_is_the_first_slot_at_or_after() -> None:
    rate = Schedule.fixed_rate(NS)
    assert rate.not_before(10 * NS, 13 * NS + 1) == 14 * NS
    assert rate.not_before(10 * NS, 5 * NS) == 10 * NS
    cron = Schedule.calendar(CronTrigger("*/5 * * * * *", UTC))
    assert cron.not_before(10 * NS, 11 * NS) == 15 * NS
    assert Schedule.fixed_delay(NS).not_before(10 * NS, 11 * NS) == 11 * NS


def test_a_calendar_schedule_starts_at_its_first_fire_time_after_the_call() -> None:
    daily = Schedule.calendar(CronTrigger("0 3 * * *", PARIS))
    assert daily.first(at(2026, 1, 10, 2, 59)) == at(2026, 1, 10, 3)
    assert daily.first(at(2026, 1, 10, 3)) == at(2026, 1, 11, 3)  # strictly after
    assert Schedule.fixed_rate(NS).first(42) == 42


@pytest.mark.parametrize(
    "schedule",
    [
        ONCE,
        Schedule.fixed_rate(7 * MS, Misfire.SKIP, True, 100 * NS, 5),
        Schedule.fixed_delay(3 * NS, until_ns=NS),
        Schedule.calendar(CronTrigger("30 2 * * *", PARIS, "Europe/Paris"), Misfire.CATCH_UP, max_runs=2),
        Schedule.calendar(CronTrigger("@hourly", timezone(timedelta(hours=5, minutes=30)))),
        Schedule.calendar(CronTrigger("0 0 * * *", _tz.local_zone(), None)),  # the local zone, as given: None
    ],
)
def test_a_schedule_survives_its_wire_form_and_its_record(schedule: Schedule) -> None:
    wire = schedule.to_wire()
    assert wire is None if schedule is ONCE else type(wire) is tuple
    assert Schedule.from_wire(wire, _tz.zone) == schedule
    start = at(2026, 1, 1)
    record = schedule.to_record(5 * NS, start)
    assert record["v"] == 2 and record["delay_ns"] == 5 * NS
    assert Schedule.from_record(record, {}, start, _tz.zone) == (schedule, 5 * NS)


def test_a_zone_the_store_cannot_keep_is_refused_by_name() -> None:
    class Custom(timezone.__base__):  # type: ignore[name-defined, misc]
        def utcoffset(self, dt: object) -> timedelta:
            return timedelta(hours=1)

    schedule = Schedule.calendar(CronTrigger("0 0 * * *", Custom()))
    with pytest.raises(ValueError, match="names no IANA zone"):
        schedule.to_record(0, 0)


def test_the_kind_a_store_knows_is_cron_for_a_calendar() -> None:
    record = Schedule.calendar(CronTrigger("0 3 * * *", PARIS, "Europe/Paris")).to_record(0, 0)
    assert record == {
        "v": 2,
        "kind": "cron",
        "delay_ns": 0,
        "misfire": "coalesce",
        "expr": "0 3 * * *",
        "tz": "Europe/Paris",
    }
    assert Kind.CALENDAR.value == "calendar"
